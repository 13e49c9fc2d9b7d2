"""One model_type's conformance: a tiny random model's own q·k against attngeom's per-head forms.

The tiny model (``tiny``) is built at random in float64 and saved with ``save_pretrained``; attngeom's
discovered layers are read back from those files. A forward pass records, per attention module, the
input and output of its q and k projections and the q and k that reach transformers' attention function
(rotary neutralised: cos 1, sin 0). For every head h the form must give the captured scores:
Q_h K_gᵀ = diag(c_q)(x W_q,h + b_q,h)(x W_k,g + b_k,g)ᵀ diag(c_k), with c one positive constant for a
``standard`` form (the 1/√d_h scale) and a positive scalar per token and head for a normalised one.
A module outside the attention interface is checked on the q and k of the score product in its forward
(``products``); one whose q and k are seen at neither is not validated (its projections' outputs would
agree with themselves whatever the module does to them before q·kᵀ: Aria's projector maps them again
through ``nn.MultiheadAttention``). Tokens that the model splits between its attention batch and token
axes otherwise (SAM's point batch, FSMT's time-first states) are compared token by token (``refolded``).
"""

from __future__ import annotations

import inspect
from contextlib import ExitStack, contextmanager

import torch

from ..architectures.discovery.attention import Found
from .faults import ObservationError, observing
from .inputs import input_sets
from .interface import calls, capturing
from .masks import add_causal, softmax_masks
from .neutral import float64_kept, rotary_neutralised, temperature_neutralised
from .observe import scores_scoring
from .products import as_heads, first_output, heads, operands, score_products, tokens_last

RTOL = 1e-5


def randomized(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    model = model.double().eval()
    if hasattr(model, "set_experts_implementation"):
        try:  # grouped matrix products take no float64
            model.set_experts_implementation("eager")
        except (ValueError, AttributeError):
            pass
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.3)
        saved = model.state_dict().keys()  # not a buffer the model makes itself (GPT-1's causal `bias`)
        for name, buffer in model.named_buffers():  # frozen affine weights (DETR's batch norms) are
            if name.endswith((".weight", ".bias")) and buffer.is_floating_point() and name in saved:
                buffer.copy_(torch.randn(buffer.shape, generator=generator, dtype=buffer.dtype) * 0.3)
    return model


@contextmanager
def _default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def capture(
    model: torch.nn.Module, items: list[Found]
) -> tuple[dict[str, dict[str, torch.Tensor]], Exception | None]:
    """By attention path: x_q, x_k (projection inputs), q, k (projection outputs), q_attn and k_attn as
    they entered the score product (the attention function's, else the product in the module's forward:
    ``products``) and ``causal`` (whether its attention probabilities were: ``masks``); with the last error
    of the forward passes when some modules never ran (``modules`` drives those on their own). An error of
    this observation code itself is raised (``faults.ObservationError``), never taken for the model's."""
    seen: dict[str, dict[str, torch.Tensor]] = {}
    modules = {item.path: model.get_submodule(item.path) for item in items}

    first_call: dict[str, bool] = {}  # path → its first call is under way (True) or over (False)

    def keep(path: str, role: str):
        @observing("the projection hook")
        def hook(projection, args, output):
            record = seen.setdefault(path, {})
            x, y = tokens_last(projection, args[0].detach(), first_output(output).detach())
            if f"x_{role}" not in record:
                record[f"x_{role}"], record[role] = x, y
            elif first_call.get(path) and _joinable(record[role], y) and _joinable(record[f"x_{role}"], x):
                # a second call within the module's first (T5Gemma 2's merged attention: the keys of the
                # decoder tokens, then of the encoder's) adds tokens to the same attention call
                record[f"x_{role}"] = torch.cat((record[f"x_{role}"], x), -2)
                record[role] = torch.cat((record[role], y), -2)

        return hook

    def opened(path: str):
        @observing("the module hook")
        def hook(module, args):
            first_call.setdefault(path, True)

        return hook

    def closed(path: str):
        @observing("the module hook")
        def hook(module, args, output):
            first_call[path] = False

        return hook

    calls.clear()
    _zero_norm_biases(modules, items)
    with ExitStack() as stack:
        for item in items:
            module = modules[item.path]
            for handle in (
                module.register_forward_pre_hook(opened(item.path)),
                module.register_forward_hook(closed(item.path)),
            ):
                stack.callback(handle.remove)
            for role, name in (("q", item.q), ("k", item.k)):
                child = module.get_submodule(item.local(name))
                handle = child.register_forward_hook(keep(item.path, role))
                stack.callback(handle.remove)
        stack.enter_context(rotary_neutralised(list(modules.values())))
        stack.enter_context(temperature_neutralised([(modules[i.path], i) for i in items]))
        stack.enter_context(capturing(model))
        stack.enter_context(_default_dtype(torch.float64))  # tensors a model makes itself (masks, positions)
        products = stack.enter_context(score_products(modules, items))
        softmaxes = stack.enter_context(softmax_masks(modules))
        kept = stack.enter_context(float64_kept(modules))
        pending = [item.path for item in items]
        failure: Exception | None = None
        for runner in _runners(model, items):
            for inputs, extra in ((i, e) for i in input_sets(runner) for e in _passes(runner)):
                before, interface = set(seen), set(calls)
                try:
                    with torch.no_grad():
                        runner(**inputs, **extra)
                    break
                except ObservationError:
                    raise
                except Exception as err:  # noqa: BLE001 — the next input set, or the next runner
                    failure = err
                    for key in set(seen) - before:  # a call cut short pairs no projection with its q·k
                        del seen[key]
                        first_call.pop(key, None)
                    for key in set(calls) - interface:
                        del calls[key]
                    products.cut_short(set(seen))
                    softmaxes.cut_short(set(seen))
                    kept.cut_short()
            pending = [p for p in pending if p not in seen]
            if not pending:
                break
        if not pending:
            failure = None
    with observing("the capture's records"):
        _add_products(modules, items, seen, products.found, softmaxes.scores)
        add_causal(model, seen, {key: bool(call["causal"]) for key, call in calls.items()}, softmaxes)
    upstream = [p for p, r in seen.items() if not all(r[x].isfinite().all() for x in ("x_q", "x_k"))]
    for path in upstream:  # non-finite states reached it (a mask's overflow upstream): driven on its own
        del seen[path]
    if upstream and failure is None:
        failure = FloatingPointError(f"non-finite states reached {upstream[0]}")
    return seen, failure


def _add_products(
    modules: dict[str, torch.nn.Module],
    items: list[Found],
    seen: dict[str, dict[str, torch.Tensor]],
    found: dict[str, tuple[torch.Tensor, torch.Tensor]],
    scores: dict[str, torch.Tensor],
) -> None:
    """Each record's q and k at its score product: the attention function's (and what that call did to
    q·k), else the product the module formed itself, with how its softmax's input was made of them."""
    for item in items:
        record = seen.get(item.path)
        if record is None:
            continue
        call = calls.get(id(modules[item.path]))
        if call is not None:
            record |= {key: value for key, value in call.items() if key != "causal"}
        elif item.path in found:
            q, k = found[item.path]
            record["q_attn"], record["k_attn"] = as_heads(q, item.n_heads), as_heads(k, item.n_kv_heads)
        if {"q", "k"} <= set(record) and "scaling" not in record and item.path in scores:
            q, k = operands(record, item)
            if q is not None:
                record |= scores_scoring(q, k, scores[item.path])


def _zero_norm_biases(modules: dict[str, torch.nn.Module], items: list[Found]) -> None:
    """A q/k LayerNorm's bias is a term the form leaves out (``qk_norm_bias``): set to 0 in the random
    model so that the rest, which the form states, is checked exactly."""
    for item in items:
        for norm in (item.q_norm, item.k_norm):
            if norm is not None and norm.bias:
                with torch.no_grad():
                    modules[item.path].get_submodule(norm.name).bias.zero_()


def _passes(runner: torch.nn.Module) -> list[dict[str, bool]]:
    """Arguments to try each input set with: first ``use_cache=False`` where the forward takes it (the
    pass as it trains, whose masks the objective is about: FSMT's decoder builds its causal mask only
    without a cache), then none (FSMT's own mask overflows in float64)."""
    return [{"use_cache": False}, {}] if "use_cache" in inspect.signature(runner.forward).parameters else [{}]


def _runners(model: torch.nn.Module, items: list[Found]) -> list[torch.nn.Module]:
    """The model itself, then each sub-model (a ``PreTrainedModel`` inside it: a vision tower, an encoder)
    that holds attention modules, for the towers a text-only forward pass does not reach."""
    from transformers import PreTrainedModel

    runners = [model]
    for path, module in model.named_modules():
        if path and isinstance(module, PreTrainedModel) and any(i.path.startswith(path + ".") for i in items):
            runners.append(module)
    return runners


def _joinable(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == b.dim() >= 2 and a.shape[:-2] == b.shape[:-2] and a.shape[-1] == b.shape[-1]


def refolded(mine: torch.Tensor, their: torch.Tensor) -> torch.Tensor:
    """``mine`` (B, n, N, d) with its tokens split between the batch and token axes as ``their`` splits
    them, where the two differ only there: a model that folds a batch-like axis (SAM's point batch) into
    its attention batch attends within each fold; a time-first model (FSMT's projections read (N, B, ·))
    has its batch and token axes the other way round. The tokens keep their order, so a wrong discovery
    still differs token by token."""
    if mine.dim() != 4 or their.dim() != 4 or mine.shape == their.shape:
        return mine
    if mine.transpose(0, 2).shape == their.shape:
        return mine.transpose(0, 2)
    (b, n, t, d), (b2, n2, t2, d2) = mine.shape, their.shape
    if (n, d) != (n2, d2) or b * t != b2 * t2:
        return mine
    return mine.transpose(1, 2).reshape(b2, t2, n, d).transpose(1, 2)


UNSEEN = "q·k not seen at a score product (no attention-interface call, no product of the head width)"
"""Why a module whose scores were not seen is not validated: its projections alone would agree with
themselves whatever the module does with their outputs before q·kᵀ."""


def compare(layer, record: dict[str, torch.Tensor]) -> str | None:
    """Why ``layer`` does not give ``record``'s scores, or None when it does: the form's q and k of the
    projections' inputs against the q and k that entered the score product, never against the
    projections' own outputs."""
    if "q_attn" not in record:
        return UNSEEN
    x_q, x_k = record["x_q"].double(), record["x_k"].double()
    ours = []
    for x, w, b, n in (
        (x_q, layer.w_q, layer.b_q, layer.n_heads),
        (x_k, layer.w_k, layer.b_k, layer.n_kv_heads),
    ):
        out = x @ w.double() + (0 if b is None else b.double())
        ours.append(heads(out, n, layer.head_dim))
    theirs = [record["q_attn"], record["k_attn"]]
    if not all(torch.isfinite(t).all() for t in theirs):
        return "the tiny model's forward pass gave non-finite q or k"
    ours = [refolded(mine, their) for mine, their in zip(ours, theirs, strict=True)]
    if any(mine.shape != their.shape for mine, their in zip(ours, theirs, strict=True)):
        return _compare_rows(layer, ours, theirs)
    vectors = _compare_vectors(layer, ours, theirs)
    return vectors and _compare_scores(layer, ours, theirs, vectors)


def _compare_rows(layer, ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> str | None:
    """q and k that the score product holds in another arrangement of tokens than the form's (B, H, N, d):
    in blocks with padding (Gemma 3n's and Gemma 4's audio chunks: (B, H, blocks, rows, d)), or some of
    the tokens (Pegasus-X's global tokens first). Each non-zero row of theirs must be a positive multiple
    of a row of the form's for the same batch item and head (one multiple for a standard form)."""
    scalars = []
    for mine, their in zip(ours, theirs, strict=True):
        their = their.double()
        if their.dim() < 4 or their.shape[:2] != mine.shape[:2] or their.shape[-1] != mine.shape[-1]:
            return f"q/k shape {tuple(their.shape)} in the model, {tuple(mine.shape)} from the form"
        rows = their.flatten(2, -2)
        lengths = rows.norm(dim=-1)
        live = lengths > 1e-12 * lengths.max().clamp_min(1e-300)
        if not live.any():
            return "the score product's q or k is all zeros"
        c = (rows @ mine.mT) / (mine * mine).sum(-1)[..., None, :].clamp_min(1e-300)  # (B, H, R, N)
        fitted = c[..., None] * mine[..., None, :, :]  # each of their rows against each of mine
        error = (rows[..., :, None, :] - fitted).abs().amax(-1) / lengths[..., None].clamp_min(1e-300)
        best = error.argmin(-1)
        error = error.gather(-1, best[..., None])[..., 0]
        c = c.gather(-1, best[..., None])[..., 0]
        if ((error > RTOL) & live).any():
            return "q or k differs from the form's projection (a row of the score product matches none)"
        if ((c <= 0) & live).any():
            return "q or k is not a positive multiple of the form's projection"
        scalars.append(c[live])
    if layer.form == "standard":
        for c in scalars:
            if ((c - c[0]).abs().max() / c.abs().max()).item() > RTOL:
                return "a standard form whose q or k is rescaled per token"
    return None


def _compare_scores(layer, ours: list[torch.Tensor], theirs: list[torch.Tensor], vectors: str) -> str | None:
    """The scores Q_h K_gᵀ against diag(c_q) (form's scores) diag(c_k): for a model that permutes the
    head dims of q and k alike (interleaved rotary layouts), which changes no score. The positive scalars
    are fitted by alternating least squares and the residual is measured against the largest score (a
    ratio of scores is ill-conditioned where the form's score is near zero)."""
    group = layer.n_heads // layer.n_kv_heads
    mine = ours[0] @ ours[1].double().repeat_interleave(group, dim=1).mT
    their = theirs[0].double() @ theirs[1].double().repeat_interleave(group, dim=1).mT
    if mine.shape != their.shape:
        return vectors
    c_q, c_k = _scalars(mine, their)
    if not ((c_q > 0).all() and (c_k > 0).all()):
        return vectors
    fitted = c_q[..., :, None] * mine * c_k[..., None, :]
    error = ((their - fitted).abs().max() / their.abs().max().clamp_min(1e-30)).item()
    if error > RTOL:
        return vectors
    product = c_q[..., :, None] * c_k[..., None, :]
    if (
        layer.form == "standard"
        and ((product - product.flatten()[0]).abs().max() / product.abs().max()).item() > RTOL
    ):
        return "a standard form whose scores are rescaled per token"
    return None


def _scalars(
    mine: torch.Tensor, their: torch.Tensor, rounds: int = 1000
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-query and per-key scalars c_q, c_k minimising |their - diag(c_q) mine diag(c_k)|, by
    alternating least squares until they stop changing (tens of rounds for an exact fit)."""
    c_k = torch.ones(mine.shape[:-2] + mine.shape[-1:], dtype=mine.dtype)
    c_q = torch.zeros(mine.shape[:-1], dtype=mine.dtype)

    def fit(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
        return torch.where(denominator > 0, numerator / denominator.clamp_min(1e-300), 1.0)  # 0 row: any

    for _ in range(rounds):
        scaled = mine * c_k[..., None, :]
        previous, c_q = c_q, fit((their * scaled).sum(-1), (scaled * scaled).sum(-1))
        scaled = mine * c_q[..., :, None]
        c_k = fit((their * scaled).sum(-2), (scaled * scaled).sum(-2))
        if ((c_q - previous).abs().max() / c_q.abs().max().clamp_min(1e-300)).item() < 1e-14:
            break
    return c_q, c_k


def _compare_vectors(layer, ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> str | None:
    """q and k themselves against positive per-token (and head) multiples of the form's projections."""
    scalars = []
    for mine, their in zip(ours, theirs, strict=True):
        their = their.double()
        if mine.shape != their.shape:
            return f"q/k shape {tuple(their.shape)} in the model, {tuple(mine.shape)} from the form"
        norm = (mine * mine).sum(-1)
        c = (mine * their).sum(-1) / norm.clamp_min(1e-30)
        zero = norm <= 1e-24 * norm.max()  # a zero row (padding): any c, and theirs must be 0 too
        c = torch.where(zero, 1.0, c)
        if not (c > 0).all():
            return "q or k is not a positive multiple of the form's projection"
        error = ((their - c[..., None] * mine).abs().max() / their.abs().max().clamp_min(1e-30)).item()
        if error > RTOL:
            return f"q or k differs from the form's projection (relative error {error:.1e})"
        scalars.append(c[~zero])
    if layer.form == "standard":
        for c in scalars:
            if len(c) and ((c - c[0]).abs().max() / c.abs().max()).item() > RTOL:
                return "a standard form whose q or k is rescaled per token"
    return None


def compare_latent(content, rope, record: dict[str, torch.Tensor]) -> str | None:
    """An MLA module: the content form against the no-rope dims of the attention function's q and k, the
    rotary form (``None`` where there is no rotary part) against the rope dims (one key shared by the heads)."""
    if "q_attn" not in record:
        return "a latent attention outside the attention interface"
    nope = content.head_dim
    q, k = record["q_attn"], record["k_attn"]
    parts = (
        (
            content,
            {"x_q": record["x_q"], "x_k": record["x_k"], "q_attn": q[..., :nope], "k_attn": k[..., :nope]},
        ),
        (
            rope,
            {
                "x_q": record["x_q"],
                "x_k": record["x_k"],
                "q_attn": q[..., nope:],
                "k_attn": k[:, :1, :, nope:],
            },
        ),
    )
    for layer, part in parts:
        if layer is None:
            continue
        why = compare(layer, part)
        if why:
            return f"{layer.stack}: {why}"
    return None
