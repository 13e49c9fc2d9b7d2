"""Updates counted in documents, as the paper trains: ``batch_documents`` documents per optimizer step.

The paper (Appendix S2.3) feeds 256 sequences per update, one document each (``[CLS] document [SEP]``,
truncated to 512 tokens, padded). Here each update draws that many documents (without replacement,
reshuffled every pass over the corpus), truncates each the same way, and packs them first-fit decreasing
into as few ``seq_len`` rows as fit; the rest of a row is ``[PAD]``. The document mask then makes every
document attend only to itself at positions counted from its own start, so each computes what its own
padded row would, while the GPU computes far fewer padded positions. The rows are cut into micro-batches
of ``batch_size`` rows (padded with empty rows), whose losses are weighted by their share of the
update's loss positions: the update's loss is the mean over all its loss positions.

Update ``t`` is a pure function of (seed, t), like the packed stream's micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .config import ConfigError, TrainConfig
from .data import IGNORED, SPECIAL_TOKENS, Corpus, MicroBatch, _generator
from .document_mask import crosses_documents, document_ids


@dataclass(frozen=True)
class Update:
    """One optimizer step's micro-batches and its size."""

    micro_batches: list[MicroBatch]
    documents: int
    tokens: int
    """Tokens of the update's documents ([CLS] and [SEP] included, padding not)."""


def pack_first_fit(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into rows of at most ``capacity``: first-fit decreasing (longest first,
    each into the first row with room), at most 11/9 of the fewest rows possible plus one."""
    rows: list[list[int]] = []
    free: list[int] = []
    for index in np.argsort(-lengths, kind="stable"):
        length = int(lengths[index])
        row = next((r for r, room in enumerate(free) if room >= length), None)
        if row is None:
            rows.append([])
            free.append(capacity)
            row = len(rows) - 1
        rows[row].append(int(index))
        free[row] -= length
    return rows


class DocumentBatches:
    """Update ``t`` of a run whose batch is counted in documents (``TrainConfig.batch_documents``)."""

    def __init__(self, corpus: Corpus, config: TrainConfig):
        if config.batch_documents is None:
            raise ConfigError("DocumentBatches needs the training setting batch_documents")
        self.corpus, self.config = corpus, config
        self.cls, self.sep, self.pad, self.mask = (
            corpus.token_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")
        )
        self.special = torch.tensor([corpus.token_id(t) for t in SPECIAL_TOKENS])
        ends = np.flatnonzero(np.asarray(corpus.tokens) == self.sep)
        starts = np.concatenate([[0], ends[:-1] + 1])
        keep = ends > starts  # a document with no tokens has nothing to learn from
        self.starts, self.lengths = starts[keep], np.minimum(ends - starts, config.seq_len - 2)[keep]
        if len(self.starts) < config.batch_documents:
            raise ConfigError(
                f"dataset {config.dataset!r} has {len(self.starts)} documents, fewer than one update of "
                f"batch_documents={config.batch_documents}; use a larger corpus or fewer documents"
            )
        self.slots = (
            round(config.mlm_probability * config.seq_len) if config.uses_masking else config.seq_len - 1
        )
        self._orders: dict[int, torch.Tensor] = {}

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            n = len(self.starts)
            self._orders = {epoch: torch.randperm(n, generator=_generator(self.config.seed, 3, epoch))}
        return self._orders[epoch]

    def documents(self, step: int) -> np.ndarray:
        """Indices (into the corpus' documents) of update ``step``'s documents."""
        size, n = self.config.batch_documents, len(self.starts)
        samples = torch.arange(step * size, (step + 1) * size)
        epochs = samples // n
        return torch.cat([self._order(int(e))[samples[epochs == e] % n] for e in epochs.unique()]).numpy()

    def rows(self, step: int) -> torch.Tensor:
        """(R, L) rows of update ``step``: its documents packed, each row's end filled with [PAD]."""
        docs = self.documents(step)
        lengths = self.lengths[docs] + 2
        packed = pack_first_fit(lengths, self.config.seq_len)
        out = torch.full((len(packed), self.config.seq_len), self.pad, dtype=torch.long)
        for r, members in enumerate(packed):
            at = 0
            for member in members:
                start, length = self.starts[docs[member]], self.lengths[docs[member]]
                out[r, at] = self.cls
                out[r, at + 1 : at + 1 + length] = torch.from_numpy(
                    self.corpus.tokens[start : start + length].astype(np.int64)
                )
                out[r, at + 1 + length] = self.sep
                at += length + 2
        return out

    def update(self, step: int) -> Update:
        """Update ``step``'s micro-batches of ``batch_size`` rows (the last one completed with empty rows,
        which carry no loss), each weighted by its share of the update's loss positions."""
        docs = self.documents(step)
        batch = self._targets(self.rows(step), _generator(self.config.seed, 4, step))
        size = self.config.batch_size
        empty = -len(batch.input_ids) % size
        fill = (self.pad, 0, IGNORED, 0)
        tensors = [
            torch.cat([t, t.new_full((empty, t.shape[1]), v)])
            for t, v in zip(batch.tensors(), fill, strict=True)
        ]
        counts = (tensors[2] != IGNORED).sum(dim=1)
        total = int(counts.sum())
        micro = [
            MicroBatch(*(t[i : i + size] for t in tensors), weight=int(counts[i : i + size].sum()) / total)
            for i in range(0, len(counts), size)
        ]
        return Update(micro, documents=len(docs), tokens=int((self.lengths[docs] + 2).sum()))

    def _targets(self, rows: torch.Tensor, gen: torch.Generator) -> MicroBatch:
        """The loss positions: BERT's corruption of round(15%) of each row's non-special tokens (at least one),
        in a fixed number of slots per row (static shapes; unused slots carry no loss); or, for a causal
        decoder, every next token inside its document."""
        owner = document_ids(rows, self.sep)
        if not self.config.uses_masking:
            positions = torch.arange(rows.shape[1] - 1).repeat(rows.shape[0], 1)
            targets = rows[:, 1:].clone()
            unseen = crosses_documents(owner, positions, 1) | (targets == self.pad)
            return MicroBatch(rows, positions, targets.masked_fill(unseen, IGNORED), owner)
        special = torch.isin(rows, self.special)
        noise = torch.rand(rows.shape, generator=gen).masked_fill(special, 2.0)
        order = noise.argsort(dim=1)[:, : self.slots]
        real = (~special).sum(dim=1, keepdim=True)
        wanted = (real * self.config.mlm_probability).round().clamp_min(1).minimum(real)
        used = torch.arange(self.slots) < wanted
        positions, sort = order.sort(dim=1)
        used = used.gather(1, sort)
        originals = rows.gather(1, positions)
        action = torch.rand(positions.shape, generator=gen)
        random_ids = torch.randint(self.corpus.vocab_size, positions.shape, generator=gen)
        replaced = torch.where(action < 0.8, self.mask, torch.where(action < 0.9, random_ids, originals))
        inputs = rows.scatter(1, positions, torch.where(used, replaced, originals))
        targets = originals.masked_fill(~used, IGNORED)
        if self.config.objective == "decoder":  # authors' variant: position i−1 predicts masked token i
            positions = (positions - 1).clamp_min(0)
        return MicroBatch(inputs, positions, targets, owner)
