"""The BERT models the paper trains, its attention initialisations, the regulariser γ·L_c, and the loss.

Encoder: ``BertForMaskedLM`` (bidirectional). Decoder: ``BertLMHeadModel`` with ``is_decoder=True``
(causal mask). Given the document of every token, attention stays inside each document and positions
restart per document (``document_mask.py``): through PyTorch SDPA with the dense document mask,
(``attention="varlen"``) through the variable-length kernel of ``document_attention.py``, or
(``attention="blocks"``) through the Triton kernels of ``document_blocks.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertForMaskedLM, BertLMHeadModel, PreTrainedModel

from ..scores import form_symmetry
from .config import ConfigError, TrainConfig
from .document_attention import BLOCKS, VARLEN
from .document_mask import document_attention_mask, document_bounds, document_positions
from .dropout import hash_hidden_dropout
from .inits import init_arm


def build_model(config: TrainConfig, vocab_size: int) -> PreTrainedModel:
    """A freshly initialised model (seeded by the caller), with the attention init of ``config.init``
    (``attention: varlen``: a model that takes its rows' document segments; ``blocks``: their bounds;
    ``auto``, not yet made concrete by ``TrainConfig.for_device``: ``dense``, which runs everywhere)."""
    if config.attention == "blocks":
        try:
            from . import document_blocks  # noqa: F401 - registers BLOCKS
        except ImportError as err:
            raise ConfigError(
                f"training setting attention=blocks needs Triton, which CUDA builds of torch bring ({err}); "
                "use attention=dense"
            ) from None
    bert = BertConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.heads,
        intermediate_size=config.intermediate,
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        max_position_embeddings=max(512, config.seq_len),
        is_decoder=config.objective == "decoder",
        use_cache=False,
        attn_implementation={"varlen": VARLEN, "blocks": BLOCKS}.get(config.attention, "sdpa"),
    )
    model = BertLMHeadModel(bert) if config.objective == "decoder" else BertForMaskedLM(bert)
    hash_hidden_dropout(model)
    init_attention(model, config.init, seed=config.seed)
    return model


def attention_modules(model: PreTrainedModel) -> list[nn.Module]:
    """The ``BertSelfAttention`` module of every layer."""
    return [layer.attention.self for layer in model.bert.encoder.layer]


@torch.no_grad()
def init_attention(model: PreTrainedModel, init: str, seed: int = 0) -> None:
    """The attention init of ``TrainConfig.init`` (its ``inits.InitArm``), applied to a model that has
    BERT's init.

    ``fresh_linear`` re-draws q, k and v (weights and biases) as a fresh ``nn.Linear`` would, as the
    authors' ``BertSelfAttentionSymmetricInit`` does. ``key`` then makes every head's W_qk = W_q W_kᵀ
    symmetric (``query``: W_k = W_q) or skew-symmetric (``skew``: W_k = W_q Sᵀ, S = A − Aᵀ). W_q keeps
    its init. In nn.Linear terms a head's W_q is ``query.weight[rows].T`` (d × d_h), so W_k = W_q Sᵀ becomes
    ``key.weight[rows] = S @ query.weight[rows]``. A has entries of variance 1/(2 d_h), so S's rows have
    about unit norm and W_k the scale of W_q.
    """
    arm = init_arm(init)
    gen = torch.Generator().manual_seed(seed + 7919)
    for attn in attention_modules(model):
        if arm.fresh_linear:
            for linear in (attn.query, attn.key, attn.value):
                _torch_default(linear, gen)
        q, k = attn.query.weight, attn.key.weight
        if arm.key == "query":
            k.copy_(q)
        elif arm.key == "skew":
            d_h = attn.attention_head_size
            for h in range(attn.num_attention_heads):
                rows = slice(h * d_h, (h + 1) * d_h)
                a = torch.randn(d_h, d_h, generator=gen, dtype=torch.float64) / (2 * d_h) ** 0.5
                k[rows] = ((a - a.T) @ q[rows].double()).to(k.dtype)


def _torch_default(linear: nn.Linear, gen: torch.Generator) -> None:
    """``nn.Linear.reset_parameters`` drawn from ``gen``: weight kaiming-uniform with a = √5, i.e.
    U(±1/√fan_in), and bias U(±1/√fan_in)."""
    bound = linear.in_features**-0.5
    weight = torch.empty(linear.weight.shape, dtype=torch.float64).uniform_(-bound, bound, generator=gen)
    linear.weight.copy_(weight)
    if linear.bias is not None:
        bias = torch.empty(linear.bias.shape, dtype=torch.float64).uniform_(-bound, bound, generator=gen)
        linear.bias.copy_(bias)


def head_symmetry(model: PreTrainedModel) -> torch.Tensor:
    """Symmetry of every head's W_qk (layers × heads), differentiable: ``scores.form_symmetry``,
    the formula ``scores.Form`` scores with.

    In nn.Linear terms ``query.weight`` is (H·d_h) × d, so head h's W_q (d × d_h, x W convention) is
    ``query.weight[rows of h].T``.
    """
    out = []
    for attn in attention_modules(model):
        n, d_h = attn.num_attention_heads, attn.attention_head_size
        w_q = attn.query.weight.float().reshape(n, d_h, -1).mT  # (H, d, d_h)
        w_k = attn.key.weight.float().reshape(n, d_h, -1).mT
        out.append(form_symmetry(w_q, w_k))
    return torch.stack(out)


def symmetry_penalty(model: PreTrainedModel, target: str) -> torch.Tensor:
    """L_c of Eq. S147 / S148 averaged over heads: ‖M‖² / ‖M_s‖² = 2 / (1 + s) pulls s to 1;
    ‖M‖² / ‖M_n‖² = 2 / (1 − s) pulls s to −1 (both are 1 at their optimum)."""
    return penalty(head_symmetry(model), target)


def penalty(symmetry: torch.Tensor, target: str, dims: tuple[int, ...] | None = None) -> torch.Tensor:
    """L_c from the heads' symmetries: the mean over ``dims`` (all of them by default)."""
    sign = 1.0 if target == "symmetric" else -1.0
    terms = 2.0 / (1.0 + sign * symmetry).clamp_min(1e-6)
    return terms.mean() if dims is None else terms.mean(dim=dims)


def hidden_states(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    documents: torch.Tensor | None = None,
    segments: torch.Tensor | None = None,
) -> torch.Tensor:
    """The encoder's last hidden states (B, L, d); with ``documents`` (B, L), each document of a packed row
    sees only itself, at positions counted from its own start: through the dense document mask, given
    their ``segments`` (``document_segments``) through the variable-length kernel, or, in a model built
    with ``attention: blocks``, through the block kernels (the bounds taken here)."""
    if documents is None:
        return model.bert(input_ids=input_ids).last_hidden_state
    positions = document_positions(documents)
    if model.config._attn_implementation == BLOCKS:
        bounds = document_bounds(documents)
        return model.bert(
            input_ids=input_ids, position_ids=positions, document_bounds=bounds
        ).last_hidden_state
    if segments is not None:
        return model.bert(input_ids=input_ids, position_ids=positions, segments=segments).last_hidden_state
    mask = document_attention_mask(documents, causal=model.config.is_decoder)
    return model.bert(input_ids=input_ids, attention_mask=mask, position_ids=positions).last_hidden_state


VOCABULARY_MULTIPLE = 64
"""The LM head's vocabulary is padded to a multiple of this for its matrix products (values unchanged)."""


def head_logits(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head's logits for these hidden states, as ``model.cls`` computes them: its transform, then
    ``decoder_logits``."""
    head = model.cls.predictions
    return decoder_logits(head.transform(hidden), head.decoder.weight, head.decoder.bias)


def decoder_logits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x Wᵀ + b`` for the decoder's vocabulary matrix W (V, d), zero-padded to a multiple of 64 rows for
    the product and the padding cut from the result: BERT's 30,522 words would put the head's three matrix
    products (forward, both gradients) on slow misaligned kernels."""
    words = weight.shape[0]
    logits = F.linear(x, F.pad(weight, (0, 0, 0, -words % VOCABULARY_MULTIPLE)))[..., :words]
    return logits + bias.to(logits.dtype)


class LanguageModelLoss(nn.Module):
    """Cross-entropy of the LM head at the loss positions only (masked positions for MLM), each weighted
    by its share of the update's loss, plus γ·L_c in the micro-batch's share.

    Targets of -100 carry no loss. Wrapping the model in one module lets DDP and torch.compile see the
    whole step.
    """

    def __init__(self, model: PreTrainedModel, reg_weight: float = 0.0, reg_target: str = "symmetric"):
        super().__init__()
        self.model = model
        self.reg_weight = reg_weight
        self.reg_target = reg_target

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        targets: torch.Tensor,
        weights: torch.Tensor,
        documents: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(total loss, LM loss) of one micro-batch: its part of the update's."""
        hidden = hidden_states(self.model, input_ids, documents, segments)
        picked = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        logits = head_logits(self.model, picked)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
        lm_loss = (losses * weights.flatten()).sum()
        if not self.reg_weight:
            return lm_loss, lm_loss
        share = weights.sum()
        return lm_loss + share * self.reg_weight * symmetry_penalty(self.model, self.reg_target), lm_loss
