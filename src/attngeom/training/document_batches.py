"""Updates counted in documents, as the paper trains: ``batch_documents`` documents per optimizer step.

The paper (Appendix S2.3) feeds 256 sequences per update, one document each (``[CLS] document [SEP]``,
truncated to 512 tokens, padded). Here each update draws that many documents (without replacement,
reshuffled every pass over the corpus), truncates each the same way, and lays them out in rows of
``seq_len``: packed first-fit decreasing into as few rows as fit (``pack_documents``), or one per row;
the rest of a row is [PAD]. The document mask makes every document attend only to itself at positions
counted from its own start, so a packed document computes what its own padded row would, while the GPU
computes far fewer padded positions.

What the loss sees is decided per document, before the layout: the masked-LM corruption of ``bernoulli``
masking is drawn token by token in the order the documents were drawn, and each loss position's weight
comes from its document (``loss_average``), so packing changes neither. (``fixed_count`` masking picks a
number of tokens per row, as it always has.) The rows then go through the model in as few passes of at
most ``max_rows`` rows as they need.

Update ``t`` is a pure function of (seed, t), like the token stream's micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .batch import IGNORED, MicroBatch, Update, at_least_one, bucket, corrupt, generator
from .config import ConfigError, TrainConfig
from .corpus import Corpus
from .tokenizer import SPECIAL_TOKENS


def pack_first_fit(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into rows of at most ``capacity``: first-fit decreasing (longest first,
    each into the first row with room), at most 11/9 of the fewest rows possible plus one. Plain Python
    lists: it runs on the feed thread for every update, holding the interpreter lock the training step
    needs; a numpy search per document took three times as long."""
    rows: list[list[int]] = []
    free: list[int] = []  # room left in each row
    for index in np.argsort(-lengths, kind="stable").tolist():
        length = int(lengths[index])
        row = len(rows)  # a new one, unless a row has room
        for candidate, room in enumerate(free):
            if room >= length:
                row = candidate
                break
        if row == len(rows):
            rows.append([])
            free.append(capacity)
        rows[row].append(index)
        free[row] -= length
    return rows


class DocumentBatches:
    """Update ``t`` of a run whose batch is counted in documents (``TrainConfig.batch_documents``), in
    passes of at most ``max_rows`` rows (default: ``batch_size``, else 32)."""

    def __init__(self, corpus: Corpus, config: TrainConfig, max_rows: int | None = None):
        if config.batch_documents is None:
            raise ConfigError("DocumentBatches needs the training setting batch_documents")
        self.corpus, self.config = corpus, config
        self.max_rows = max_rows or config.micro_batch_rows
        self.cls, self.sep, self.pad, self.mask = (
            corpus.token_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")
        )
        self.special = np.array([corpus.token_id(t) for t in SPECIAL_TOKENS])
        self.is_special = np.zeros(corpus.vocab_size, dtype=bool)  # a lookup: np.isin sorts every update
        self.is_special[self.special] = True
        self.starts, lengths = corpus.document_spans()
        self.lengths = np.minimum(lengths, config.seq_len - 2)
        if len(self.starts) < config.batch_documents:
            raise ConfigError(
                f"dataset {config.dataset!r} has {len(self.starts)} documents, fewer than one update of "
                f"batch_documents={config.batch_documents}; use a larger corpus or fewer documents"
            )
        self.slots = round(config.mlm_probability * config.seq_len)  # fixed_count masking
        self.groups = config.grad_accum if config.loss_average == "micro_batch" else 1
        self._orders: dict[int, torch.Tensor] = {}

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            n = len(self.starts)
            self._orders = {epoch: torch.randperm(n, generator=generator(self.config.seed, 3, epoch))}
        return self._orders[epoch]

    def documents(self, step: int) -> np.ndarray:
        """Indices (into the corpus' documents) of update ``step``'s documents, in the order drawn."""
        size, n = self.config.batch_documents, len(self.starts)
        samples = torch.arange(step * size, (step + 1) * size)
        epochs = samples // n
        return torch.cat([self._order(int(e))[samples[epochs == e] % n] for e in epochs.unique()]).numpy()

    def heads(self, sizes: np.ndarray) -> tuple[np.ndarray, int]:
        """Where each document's [CLS] goes in the flattened rows (documents of ``sizes`` tokens, in the
        order drawn), and how many rows of ``seq_len`` they take."""
        length = self.config.seq_len
        if not self.config.pack_documents:
            return np.arange(len(sizes)) * length, len(sizes)
        packed = pack_first_fit(sizes, length)
        order = np.array([member for row in packed for member in row])
        row_of = np.repeat(np.arange(len(packed)), [len(row) for row in packed])
        before = np.cumsum(sizes[order]) - sizes[order]  # tokens ahead of each, over all rows
        row_start = before[np.cumsum([0] + [len(row) for row in packed[:-1]])]
        heads = np.empty(len(sizes), dtype=np.int64)
        heads[order] = row_of * length + before - row_start[row_of]
        return heads, len(packed)

    def layout(self, step: int) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Update ``step`` as (R, L) rows (each row's end filled with [PAD]), the flat place in them of every
        token of its documents (in the order drawn, [CLS] and [SEP] included), and each token's document."""
        placed = self._placed(step)
        out = np.full(placed.rows * self.config.seq_len, self.pad, dtype=np.int64)
        out[placed.places] = placed.values
        return torch.from_numpy(out.reshape(placed.rows, -1)), placed.places, placed.owner

    def _placed(self, step: int) -> _Placed:
        docs = self.documents(step)
        sizes = self.lengths[docs] + 2
        heads, n_rows = self.heads(sizes)
        owner = np.repeat(np.arange(len(docs)), sizes)
        within = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        values = self.corpus.tokens[self.starts[docs][owner] + np.maximum(within - 1, 0)].astype(np.int64)
        first, last = within == 0, within == sizes[owner] - 1
        values[first], values[last] = self.cls, self.sep
        return _Placed(values, heads[owner] + within, owner, n_rows, self.is_special[values])

    def update(self, step: int) -> Update:
        """Update ``step``'s micro-batches: its rows in as few passes of at most ``max_rows`` rows as they
        need, each pass's rows rounded up (``batch.bucket``) with empty rows, which carry no loss. Built with
        numpy on the host, off the GPU's path (``step.feed_updates``)."""
        placed = self._placed(step)
        length = self.config.seq_len
        passes = -(-placed.rows // self.max_rows)
        size = bucket(-(-placed.rows // passes))
        ids = np.full(passes * size * length, self.pad, dtype=np.int64)
        ids[placed.places] = placed.values
        documents = np.zeros(len(ids), dtype=np.int32)  # each document its own number, padding 0
        documents[placed.places] = placed.owner + 1
        gen = generator(self.config.seed, 4, step)
        if not self.config.uses_masking:
            positions, targets, owners = self._next_tokens(ids, documents)
        elif self.config.masking == "bernoulli":
            positions, targets, owners = self._bernoulli(ids, placed, gen)
        else:
            positions, targets, owners = self._fixed_count(ids, documents, placed.rows, gen)
        if self.config.objective == "decoder" and self.config.uses_masking:  # position i−1 predicts masked i
            positions = np.maximum(positions - 1, 0)
        weights = self._weights(targets, owners)
        tensors = [
            torch.from_numpy(t.reshape(passes * size, -1))
            for t in (ids, positions, targets, weights, documents)
        ]
        micro = [MicroBatch(*(t[i : i + size] for t in tensors)) for i in range(0, passes * size, size)]
        return Update(micro, documents=self.config.batch_documents, tokens=len(placed.places))

    def _weights(self, targets: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """Each loss position's share of the update's loss (``batch.position_weights``), its group being
        that of its document in the order drawn (``loss_average``), so the layout does not change it."""
        carries = targets != IGNORED
        group = owners * self.groups // self.config.batch_documents
        counts = np.bincount(group[carries], minlength=self.groups)
        share = 1 / (self.groups * np.maximum(counts, 1))
        return np.where(carries, share[np.clip(group, 0, self.groups - 1)], 0.0).astype(np.float32)

    def _next_tokens(self, ids: np.ndarray, documents: np.ndarray) -> tuple[np.ndarray, ...]:
        """A causal decoder's loss positions: every position predicts the next token of its document."""
        length = self.config.seq_len
        here, there = documents.reshape(-1, length)[:, :-1], documents.reshape(-1, length)[:, 1:]
        positions = np.broadcast_to(np.arange(length - 1), here.shape).copy()
        targets = np.where((here == there) & (there > 0), ids.reshape(-1, length)[:, 1:], IGNORED)
        return positions, targets, here.astype(np.int64) - 1

    def _bernoulli(self, ids: np.ndarray, placed: _Placed, gen: torch.Generator) -> tuple[np.ndarray, ...]:
        """Each non-special token with probability ``mlm_probability``, as transformers'
        ``DataCollatorForLanguageModeling`` draws it; drawn token by token in the order the documents were
        drawn, so the same tokens are corrupted the same way however the documents are laid out. Each
        row's picks fill its first slots (as many as the row with the most picks needs, ``bucket``ed)."""
        count = len(placed.values)
        noise, action = (torch.rand(count, generator=gen).numpy() for _ in range(2))
        random_ids = torch.randint(self.corpus.vocab_size, (count,), generator=gen).numpy()
        chosen = (noise < self.config.mlm_probability) & ~placed.special
        group = placed.owner * self.groups // self.config.batch_documents  # as ``_weights`` groups them
        bounds = np.searchsorted(group, np.arange(self.groups + 1))  # owners ascend: groups are runs
        for g in range(self.groups):  # each group of loss positions holds one at least
            members = slice(bounds[g], bounds[g + 1])
            chosen[members] = at_least_one(chosen[members], noise[members], ~placed.special[members])
        places, originals = placed.places[chosen], placed.values[chosen]
        ids[places] = corrupt(originals, self.mask, action[chosen], random_ids[chosen])
        order = np.argsort(places, kind="stable")
        picked, originals, owners = places[order], originals[order], placed.owner[chosen][order]
        row, column = np.divmod(picked, self.config.seq_len)
        per_row = np.bincount(row, minlength=len(ids) // self.config.seq_len)
        slots = bucket(max(1, int(per_row.max())))
        rank = np.arange(len(picked)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
        positions = np.zeros((len(per_row), slots), dtype=np.int64)
        targets = np.full((len(per_row), slots), IGNORED, dtype=np.int64)
        owner_at = np.full((len(per_row), slots), -1, dtype=np.int64)
        positions[row, rank], targets[row, rank], owner_at[row, rank] = column, originals, owners
        return positions, targets, owner_at

    def _fixed_count(
        self, ids: np.ndarray, documents: np.ndarray, n_rows: int, gen: torch.Generator
    ) -> tuple[np.ndarray, ...]:
        """round(``mlm_probability`` × its non-special tokens) of each row (at least one), in a fixed
        number of slots per row (the rows beyond ``n_rows``, padding, carry none)."""
        length = self.config.seq_len
        rows = torch.from_numpy(ids.reshape(-1, length)[:n_rows])
        special = torch.isin(rows, torch.from_numpy(self.special))
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
        replaced = torch.where(
            used,
            torch.from_numpy(corrupt(originals.numpy(), self.mask, action.numpy(), random_ids.numpy())),
            originals,
        )
        ids.reshape(-1, length)[:n_rows] = rows.scatter(1, positions, replaced).numpy()
        grown = np.zeros((len(ids) // length, self.slots), dtype=np.int64)
        grown[:n_rows] = positions.numpy()
        targets = np.full_like(grown, IGNORED)
        targets[:n_rows] = originals.masked_fill(~used, IGNORED).numpy()
        owners = np.take_along_axis(documents.reshape(-1, length), grown, axis=1).astype(np.int64) - 1
        return grown, targets, owners


@dataclass(frozen=True)
class _Placed:
    """An update's tokens (its documents in the order drawn, each [CLS] … [SEP]): their ids, their flat
    place in the rows, their document, how many rows they take, and which are special (never masked)."""

    values: np.ndarray
    places: np.ndarray
    owner: np.ndarray
    rows: int
    special: np.ndarray
