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
    free = np.zeros(len(lengths), dtype=np.int64)  # room left in each row (at most one row per item)
    for index in np.argsort(-lengths, kind="stable"):
        length = int(lengths[index])
        row = int(np.argmax(free[: len(rows)] >= length)) if len(rows) else 0
        if not len(rows) or free[row] < length:
            row = len(rows)
            rows.append([])
            free[row] = capacity
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
        lengths = self.lengths[docs]
        packed = pack_first_fit(lengths + 2, self.config.seq_len)
        order = np.array([member for row in packed for member in row])
        sizes = lengths[order]
        # where each document's [CLS] goes in the flattened rows: its row's start plus the documents before
        rows = np.repeat(np.arange(len(packed)), [len(row) for row in packed])
        before = np.cumsum(sizes + 2) - (sizes + 2)
        row_start = np.concatenate(
            [[0], np.cumsum([lengths[row].sum() + 2 * len(row) for row in packed])[:-1]]
        )
        heads = rows * self.config.seq_len + before - row_start[rows]
        # every token of every document at once: its document, and its place inside it
        owner = np.repeat(np.arange(len(order)), sizes)
        within = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        out = np.full(len(packed) * self.config.seq_len, self.pad, dtype=np.int64)
        out[heads] = self.cls
        out[heads[owner] + 1 + within] = self.corpus.tokens[self.starts[docs[order]][owner] + within]
        out[heads + 1 + sizes] = self.sep
        return torch.from_numpy(out.reshape(len(packed), self.config.seq_len))

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
        order = noise.topk(self.slots, dim=1, largest=False).indices  # ascending noise: rank order
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
