"""Several runs of one BERT shape as one model: each weight stacked over runs, each product batched.

A small model (BERT-mini: d = 256) leaves most of an H100 idle however its kernels are launched; runs that
differ only in seed and init have the same shapes, so their weights can be stacked into one (R, …) tensor
each and their forward and backward passes computed as one graph: matrix products become batched products
(R at a time), everything else (embeddings, LayerNorm, attention, dropout, the loss) runs over R times the
rows; attention keeps to each document as the runs' models were built to (the dense mask, the flash kernel's
variable-length form or the block kernels). Each run's numbers are those of its own ``LanguageModelLoss``
(same formulas as transformers' BERT, checked against it in tests/test_training_stacked.py); hidden dropout
(``dropout.hashed_dropout``) draws independent masks for every element, so each run gets its own, as
separate runs would (not the same draws).

The runs' own ``transformers`` models are kept, their parameters turned into views of the stacked
weights: scoring, checkpoints and ``save_pretrained`` see each run's live weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from ..scores import form_symmetry
from .document_attention import BLOCKS, document_attention
from .document_mask import document_attention_mask, document_bounds, document_positions
from .dropout import hashed_dropout
from .model import VOCABULARY_MULTIPLE, penalty


class Documents(NamedTuple):
    """How attention keeps to each token's document in the stacked rows: a dense mask (``dense``), the
    flattened rows' segments (``varlen``) or each place's document bounds (``blocks``); none of them:
    attention over whole rows (no document mask)."""

    mask: torch.Tensor | None = None
    segments: torch.Tensor | None = None
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None


class StackedLoss(nn.Module):
    """R runs' ``LanguageModelLoss`` in one module: inputs (R, B, …), per-run (total, LM) losses (R,)."""

    def __init__(
        self, models: Sequence[PreTrainedModel], reg_weight: float = 0.0, reg_target: str = "symmetric"
    ):
        super().__init__()
        first = models[0].config
        self.layers, self.heads = first.num_hidden_layers, first.num_attention_heads
        self.eps, self.pad, self.causal = first.layer_norm_eps, first.pad_token_id, bool(first.is_decoder)
        self.hidden_dropout, self.attention_dropout = (
            first.hidden_dropout_prob,
            first.attention_probs_dropout_prob,
        )
        self.reg_weight, self.reg_target = reg_weight, reg_target
        self.flash = None  # the block kernels, where the runs' models were built with attention=blocks
        if first._attn_implementation == BLOCKS:
            from .document_blocks import document_flash  # Triton: imported only where chosen

            self.flash = document_flash
        self.names = [name for name, _ in models[0].named_parameters()]
        self.index = {name: i for i, name in enumerate(self.names)}
        with torch.no_grad():
            per_run = [dict(model.named_parameters()) for model in models]
            self.weights = nn.ParameterList(
                [nn.Parameter(torch.stack([run[name] for run in per_run])) for name in self.names]
            )
            for r, run in enumerate(per_run):  # each run's model now reads (and writes) its slice
                for name, param in run.items():
                    param.data = self.weights[self.index[name]].data[r]

    @property
    def runs(self) -> int:
        return self.weights[0].shape[0]

    def w(self, name: str) -> torch.Tensor:
        return self.weights[self.index[name]]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        targets: torch.Tensor,
        weights: torch.Tensor,
        documents: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(total loss, LM loss) of each run's micro-batch (its part of the run's update), each (R,);
        ``segments``: the stacked rows' document segments, for the variable-length attention kernel."""
        hidden = self.encode(input_ids, documents, segments)  # (R, B, L, d)
        picked = hidden.gather(2, positions.unsqueeze(-1).expand(-1, -1, -1, hidden.shape[-1]))
        logits = self.head(picked.flatten(1, 2))  # (R, B·P, V)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
        lm_loss = (losses.view(self.runs, -1) * weights.flatten(1)).sum(dim=1)
        if not self.reg_weight:
            return lm_loss, lm_loss
        share = weights.flatten(1).sum(dim=1)
        return lm_loss + share * self.reg_weight * self.symmetry_penalty(), lm_loss

    def encode(
        self, input_ids: torch.Tensor, documents: torch.Tensor | None, segments: torch.Tensor | None = None
    ) -> torch.Tensor:
        runs, rows, length = input_ids.shape
        prefix = "bert.embeddings."
        words = self._lookup(prefix + "word_embeddings.weight", input_ids)
        words = torch.where((input_ids == self.pad).unsqueeze(-1), words.detach(), words)  # padding_idx
        where: Documents = Documents()
        if documents is None:
            positions = torch.arange(length, device=input_ids.device).expand_as(input_ids)
        else:
            flat = documents.flatten(0, 1)
            positions = document_positions(flat).view_as(documents)
            if segments is not None:
                where = Documents(segments=segments)
            elif self.flash is not None:
                where = Documents(bounds=document_bounds(flat))
            else:
                where = Documents(mask=document_attention_mask(flat, self.causal))
        x = words + self.w(prefix + "token_type_embeddings.weight")[:, 0, None, None, :]
        x = x + self._lookup(prefix + "position_embeddings.weight", positions)
        x = self._dropout(self._norm(x.flatten(1, 2), prefix + "LayerNorm"), self.hidden_dropout)
        for layer in range(self.layers):
            x = self._layer(x, f"bert.encoder.layer.{layer}.", rows, where)
        return x.view(runs, rows, length, -1)

    def _layer(self, x: torch.Tensor, prefix: str, rows: int, where: Documents) -> torch.Tensor:
        """One encoder layer over x (R, B·L, d), as ``BertLayer`` computes it."""
        runs, tokens, width = x.shape
        shape = (runs * rows, tokens // rows, self.heads, width // self.heads)  # (B, L, H, D)
        q, k, v = (
            self._linear(x, prefix + f"attention.self.{part}").view(shape)
            for part in ("query", "key", "value")
        )
        dropout, scale = (self.attention_dropout if self.training else 0.0), shape[-1] ** -0.5
        if where.bounds is not None:
            context = self.flash(q, k, v, *where.bounds, dropout, self.causal, scale)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, L, D)
            if where.segments is not None:
                context = document_attention(q, k, v, where.segments, dropout, self.causal, scale)
            else:
                context = F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    attn_mask=where.mask,
                    dropout_p=dropout,
                    is_causal=self.causal and where.mask is None,
                    scale=scale,
                ).transpose(1, 2)
        context = context.reshape(runs, tokens, width)
        attended = self._dropout(
            self._linear(context, prefix + "attention.output.dense"), self.hidden_dropout
        )
        x = self._norm(attended + x, prefix + "attention.output.LayerNorm")
        inner = F.gelu(self._linear(x, prefix + "intermediate.dense"))
        out = self._dropout(self._linear(inner, prefix + "output.dense"), self.hidden_dropout)
        return self._norm(out + x, prefix + "output.LayerNorm")

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head's logits (R, N, V), as ``model.head_logits`` computes them (vocabulary padded to a
        multiple of 64 for the product, the padding cut from the result)."""
        x = F.gelu(self._linear(hidden, "cls.predictions.transform.dense"))
        x = self._norm(x, "cls.predictions.transform.LayerNorm")
        weight = self.w("bert.embeddings.word_embeddings.weight")  # tied to the decoder
        words = weight.shape[1]
        logits = (x @ F.pad(weight, (0, 0, 0, -words % VOCABULARY_MULTIPLE)).mT)[..., :words]
        return logits + self.w("cls.predictions.bias").unsqueeze(1).to(logits.dtype)

    def symmetry_penalty(self) -> torch.Tensor:
        """Each run's L_c (R,), as ``model.symmetry_penalty`` computes it for one model."""
        out = []
        for layer in range(self.layers):
            prefix = f"bert.encoder.layer.{layer}.attention.self."
            w_q, w_k = (
                self.w(prefix + f"{part}.weight").float().unflatten(1, (self.heads, -1)).mT
                for part in ("query", "key")
            )
            out.append(form_symmetry(w_q, w_k))  # (R, H)
        return penalty(torch.stack(out, dim=1), self.reg_target, dims=(1, 2))

    def _linear(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        """``nn.Linear`` of every run at once: (R, N, in) → (R, N, out), one batched product."""
        return torch.baddbmm(self.w(prefix + ".bias").unsqueeze(1), x, self.w(prefix + ".weight").mT)

    def _norm(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        normed = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        return normed * self.w(prefix + ".weight").unsqueeze(1) + self.w(prefix + ".bias").unsqueeze(1)

    def _lookup(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows of each run's own table: ids (R, …) into the (R, V, d) tables, as one lookup."""
        table = self.w(name)
        offsets = torch.arange(table.shape[0], device=ids.device) * table.shape[1]
        return F.embedding(ids + offsets.view(-1, *[1] * (ids.dim() - 1)), table.flatten(0, 1))

    def _dropout(self, x: torch.Tensor, p: float) -> torch.Tensor:
        return hashed_dropout(x, p, self.training)
