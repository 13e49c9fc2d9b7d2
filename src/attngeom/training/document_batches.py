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

import numpy as np
import torch

from .batch import IGNORED, MicroBatch, Update, bucket, chosen_slots, corrupt, generator, position_weights
from .config import ConfigError, TrainConfig
from .corpus import Corpus
from .document_mask import crosses_documents, document_ids
from .tokenizer import SPECIAL_TOKENS


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
        self.special = torch.tensor([corpus.token_id(t) for t in SPECIAL_TOKENS])
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
        docs = self.documents(step)
        sizes = self.lengths[docs] + 2
        heads, n_rows = self.heads(sizes)
        owner = np.repeat(np.arange(len(docs)), sizes)
        within = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        values = self.corpus.tokens[self.starts[docs][owner] + np.maximum(within - 1, 0)].astype(np.int64)
        values[within == 0] = self.cls
        values[within == sizes[owner] - 1] = self.sep
        places = heads[owner] + within
        out = np.full(n_rows * self.config.seq_len, self.pad, dtype=np.int64)
        out[places] = values
        return torch.from_numpy(out.reshape(n_rows, self.config.seq_len)), places, owner

    def update(self, step: int) -> Update:
        """Update ``step``'s micro-batches: its rows in as few passes of at most ``max_rows`` rows as they
        need, each pass's rows rounded up (``batch.bucket``) with empty rows, which carry no loss."""
        rows, places, owner = self.layout(step)
        gen = generator(self.config.seed, 4, step)
        inputs, positions, targets = self._targets(rows, places, gen)
        # each loss position's document, so its weight (``loss_average``) does not depend on the layout
        document_at = np.full(rows.numel(), -1, dtype=np.int64)
        document_at[places] = owner
        flat = torch.arange(len(rows)).unsqueeze(1) * rows.shape[1] + positions
        group = torch.from_numpy(document_at)[flat] * self.groups // self.config.batch_documents
        weights = position_weights(targets, group if self.groups > 1 else None, self.groups)
        passes = -(-len(rows) // self.max_rows)
        size = bucket(-(-len(rows) // passes))
        whole = MicroBatch(inputs, positions, targets, weights, document_ids(rows, self.sep))
        whole = whole.padded(passes * size, positions.shape[1], self.pad)
        micro = [whole.apply(lambda t, i=i: t[i : i + size]) for i in range(0, passes * size, size)]
        return Update(micro, documents=self.config.batch_documents, tokens=len(places))

    def _targets(
        self, rows: torch.Tensor, places: np.ndarray, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(inputs, positions, targets): BERT's corruption (``masking``), in as many slots per row as the
        row with the most needs (``fixed_count``: round(15% × ``seq_len``)), unused slots carrying no
        loss; or, for a causal decoder, every next token inside its document."""
        if not self.config.uses_masking:
            owner = document_ids(rows, self.sep)
            positions = torch.arange(rows.shape[1] - 1).repeat(rows.shape[0], 1)
            targets = rows[:, 1:].clone()
            unseen = crosses_documents(owner, positions, 1) | (targets == self.pad)
            return rows, positions, targets.masked_fill(unseen, IGNORED)
        if self.config.masking == "fixed_count":
            inputs, positions, targets = self._fixed_count(rows, gen)
        else:
            inputs, positions, targets = self._bernoulli(rows, torch.from_numpy(places), gen)
        if self.config.objective == "decoder":  # authors' variant: position i−1 predicts masked token i
            positions = (positions - 1).clamp_min(0)
        return inputs, positions, targets

    def _fixed_count(self, rows: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        """round(``mlm_probability`` × its non-special tokens) of each row (at least one), in a fixed
        number of slots per row."""
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
        replaced = corrupt(originals, self.mask, action, random_ids)
        inputs = rows.scatter(1, positions, torch.where(used, replaced, originals))
        return inputs, positions, originals.masked_fill(~used, IGNORED)

    def _bernoulli(
        self, rows: torch.Tensor, places: torch.Tensor, gen: torch.Generator
    ) -> tuple[torch.Tensor, ...]:
        """Each non-special token with probability ``mlm_probability``, as transformers'
        ``DataCollatorForLanguageModeling`` draws it; drawn token by token in the order the documents were
        drawn, so the same tokens are corrupted the same way however the documents are laid out."""
        flat = rows.flatten()
        values = flat[places]
        noise, action = torch.rand(len(places), generator=gen), torch.rand(len(places), generator=gen)
        random_ids = torch.randint(self.corpus.vocab_size, (len(places),), generator=gen)
        chosen = (noise < self.config.mlm_probability) & ~torch.isin(values, self.special)
        inputs = flat.clone()
        inputs[places] = torch.where(chosen, corrupt(values, self.mask, action, random_ids), values)
        picked = torch.zeros(len(flat), dtype=torch.bool)
        picked[places[chosen]] = True
        positions, used = chosen_slots(picked.view_as(rows))
        targets = rows.gather(1, positions).masked_fill(~used, IGNORED)
        return inputs.view_as(rows), positions, targets
