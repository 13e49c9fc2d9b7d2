"""Updates cut from the token stream: ``grad_accum`` micro-batches of ``batch_size`` rows of ``seq_len``.

A row is [CLS] + the next ``seq_len − 1`` tokens of the stream, so no position is padding; rows are drawn
without replacement and reshuffled every pass over the corpus. Micro-batch ``i`` is a pure function of
(seed, i): a run that resumes at step t needs no saved loader state, only t.
"""

from __future__ import annotations

import numpy as np
import torch

from .batch import IGNORED, MicroBatch, at_least_one, chosen_slots, corrupt, generator, position_weights
from .config import ConfigError, TrainConfig
from .corpus import Corpus
from .document_mask import crosses_documents, document_ids
from .tokenizer import SPECIAL_TOKENS


class PackedBatches:
    """Micro-batch ``i`` of a run. With ``document_mask``, each batch also says which document every token
    belongs to."""

    def __init__(self, corpus: Corpus, config: TrainConfig):
        self.corpus = corpus
        self.config = config
        self.width = config.seq_len - 1  # stream tokens per row, after [CLS]
        self.n_rows = len(corpus.tokens) // self.width
        if self.n_rows < config.micro_batch_rows:
            raise ConfigError(
                f"dataset {config.dataset!r} has {len(corpus.tokens)} tokens, fewer than one batch of "
                f"{config.micro_batch_rows} × {config.seq_len}; use a larger corpus or smaller "
                "batch_size/seq_len"
            )
        self.cls, self.sep, self.mask = (corpus.token_id(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
        self.special = torch.tensor([corpus.token_id(t) for t in SPECIAL_TOKENS])
        self.n_masked = max(1, round(config.mlm_probability * self.width))
        self._orders: dict[int, torch.Tensor] = {}

    def _order(self, epoch: int) -> torch.Tensor:
        if epoch not in self._orders:
            self._orders = {
                epoch: torch.randperm(self.n_rows, generator=generator(self.config.seed, 1, epoch))
            }
        return self._orders[epoch]

    def rows(self, index: int) -> torch.Tensor:
        """The (B, L) token rows of micro-batch ``index``, before any masking."""
        size = self.config.micro_batch_rows
        samples = torch.arange(index * size, (index + 1) * size)
        epochs = samples // self.n_rows
        rows = torch.cat([self._order(int(e))[samples[epochs == e] % self.n_rows] for e in epochs.unique()])
        starts = rows.numpy()[:, None] * self.width + np.arange(self.width)
        out = torch.empty(size, self.config.seq_len, dtype=torch.long)
        out[:, 0] = self.cls
        out[:, 1:] = torch.from_numpy(self.corpus.tokens[starts].astype(np.int64))
        return out

    def __getitem__(self, index: int) -> MicroBatch:
        rows = self.rows(index)
        owner = document_ids(rows, self.sep) if self.config.document_mask else None
        if self.config.uses_masking:
            inputs, positions, targets = self._mask(rows, generator(self.config.seed, 2, index))
        else:
            positions = torch.arange(rows.shape[1] - 1).repeat(rows.shape[0], 1)  # own memory: pinnable
            inputs, targets = rows, rows[:, 1:].clone()
        if owner is not None and self.config.objective == "decoder":  # no peeking into the next document
            targets = targets.masked_fill(crosses_documents(owner, positions, 1), IGNORED)
        weights = position_weights(targets) / self.config.grad_accum
        return MicroBatch(inputs, positions, targets, weights, owner)

    def _mask(self, rows: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        """(inputs, positions, targets) of BERT's corruption: of exactly ``n_masked`` non-special
        positions per row (``fixed_count``: static shapes), or of each with ``mlm_probability``."""
        noise = torch.rand(rows.shape, generator=gen)
        special = torch.isin(rows, self.special)
        if self.config.masking == "fixed_count":
            noise[special] = 2.0
            positions = noise.topk(self.n_masked, dim=1, largest=False).indices.sort(dim=1).values
            used = torch.ones_like(positions, dtype=torch.bool)
        else:
            maskable = ~special
            chosen = at_least_one(
                ((noise < self.config.mlm_probability) & maskable).numpy(), noise.numpy(), maskable.numpy()
            )
            positions, used = chosen_slots(torch.from_numpy(chosen))
        originals = rows.gather(1, positions)
        action = torch.rand(positions.shape, generator=gen)
        random_ids = torch.randint(self.corpus.vocab_size, positions.shape, generator=gen)
        replaced = torch.from_numpy(corrupt(originals.numpy(), self.mask, action.numpy(), random_ids.numpy()))
        inputs = rows.scatter(1, positions, torch.where(used, replaced, originals))
        if self.config.objective == "decoder":  # authors' variant: position i−1 predicts masked token i
            positions = (positions - 1).clamp_min(0)
        return inputs, positions, originals.masked_fill(~used, IGNORED)
