"""A config.json read as written (``attngeom.sources.config``) scores exactly as transformers' config does.

For every model type of ``READ_AS_WRITTEN``, a tiny random model is saved and scored twice: from the
file's own entries (the default path, which never imports transformers) and from
``AutoConfig.from_pretrained`` of the same folder. The tensors and the arithmetic are the same on both
paths, only the config object differs, so the records must be identical (``file_hash`` aside: it hashes
the config's entries, transformers' full set on one path, the file's on the other). Each case is scored
from the config.json that ``save_pretrained`` writes and from a minimal one that states only the entries
``READ_AS_WRITTEN`` requires (plus the case's own), where transformers fills in its class defaults.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from conformance import build
from transformers import AutoConfig, AutoModelForCausalLM

from attngeom.engine import score_source
from attngeom.errors import InputError
from attngeom.sources import open_source
from attngeom.sources.config import READ_AS_WRITTEN, FileConfig, load_config
from attngeom.sources.local import safetensors_names, safetensors_source

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}

CASES = {
    "llama, multi-head, kv heads left to the default": ("llama", {"num_key_value_heads": 4}, ()),
    "llama, grouped-query": ("llama", {"num_key_value_heads": 2}, ("num_key_value_heads",)),
    "llama, head_dim set": (
        "llama",
        {"num_key_value_heads": 2, "head_dim": 12},
        ("num_key_value_heads", "head_dim"),
    ),
    "llama, a window stated": (
        "llama",
        {"num_key_value_heads": 2, "sliding_window": 16},
        ("num_key_value_heads", "sliding_window"),
    ),
    "mixtral": (
        "mixtral",
        {"num_key_value_heads": 2, "num_local_experts": 2, "num_experts_per_tok": 1},
        ("num_key_value_heads",),
    ),
    "mistral, windowed": (
        "mistral",
        {"num_key_value_heads": 2, "sliding_window": 16},
        ("num_key_value_heads",),
    ),
    "mistral, no window": (
        "mistral",
        {"num_key_value_heads": 2, "sliding_window": None},
        ("num_key_value_heads",),
    ),
    "gemma": ("gemma", {"num_key_value_heads": 1, "head_dim": 12}, ()),
}
"""case → (model_type, settings of the model, entries the minimal config.json states besides the required)."""


def saved(tmp_path, model_type: str, settings: dict):
    folder = tmp_path / "saved"
    config = AutoConfig.for_model(model_type, vocab_size=64, **SIZES, **settings)
    build(config, AutoModelForCausalLM).save_pretrained(folder)
    return folder


def minimal(folder, model_type: str, stated: tuple[str, ...]) -> None:
    """Rewrite ``folder``'s config.json with only the required entries and ``stated``."""
    full = json.loads((folder / "config.json").read_text())
    keep = ("model_type", *READ_AS_WRITTEN[model_type], *stated)
    (folder / "config.json").write_text(json.dumps({key: full[key] for key in keep}))


def both_ways(folder) -> tuple[pa.Table, pa.Table]:
    """Records scored from the file's entries and from transformers' config of the same folder."""
    as_written = open_source(folder)
    assert isinstance(as_written.config, FileConfig)
    weights = {name: "model.safetensors" for name in safetensors_names(folder / "model.safetensors")}
    through_transformers = safetensors_source(
        str(folder),
        AutoConfig.from_pretrained(folder),
        weights,
        locate=lambda shard: folder / shard,
        model_id=folder.name,
    )
    return tuple(
        score_source(source, progress=False).drop_columns(["file_hash"])
        for source in (as_written, through_transformers)
    )


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_read_as_written_scores_as_transformers_config_does(case, tmp_path):
    model_type, settings, stated = CASES[case]
    folder = saved(tmp_path, model_type, settings)
    for config_file in ("as saved", "minimal"):
        if config_file == "minimal":
            minimal(folder, model_type, stated)
        ours, theirs = both_ways(folder)
        assert ours.num_rows == 2 * (SIZES["num_attention_heads"] + 1)
        assert ours.equals(theirs), (config_file, ours.to_pylist()[-1], theirs.to_pylist()[-1])


def test_every_read_as_written_type_has_a_case():
    assert {model_type for model_type, _, _ in CASES.values()} == set(READ_AS_WRITTEN)


LLAMA = {"model_type": "llama", **SIZES, "num_key_value_heads": 2}
NOT_AS_WRITTEN = {
    "a required entry left out (transformers: 32 layers)": (
        {key: value for key, value in LLAMA.items() if key != "num_hidden_layers"},
        "transformers",
    ),
    "mistral's window left out (transformers: 4096)": ({**LLAMA, "model_type": "mistral"}, "transformers"),
    "a size that is not an integer": ({**LLAMA, "hidden_size": "32"}, "refused"),
    "a head count that is not positive": ({**LLAMA, "num_key_value_heads": 0}, "refused"),
}
"""config.json → how it is read: by transformers' config class, or refused with an InputError."""


@pytest.mark.parametrize("case", list(NOT_AS_WRITTEN))
def test_anything_else_is_read_by_transformers_or_refused(case, tmp_path):
    entries, expected = NOT_AS_WRITTEN[case]
    (tmp_path / "config.json").write_text(json.dumps(entries))
    try:
        config = load_config(tmp_path / "config.json", "test")
    except InputError:
        assert expected == "refused"
    else:
        assert expected == "transformers" and not isinstance(config, FileConfig)


UNNEEDED = ("transformers", "pandas", "huggingface_hub", "sympy", "attngeom.training", "attngeom.pipeline")
"""What a local score of a Llama checkpoint does without: ≈ 2.5 CPU seconds of imports in all."""


def test_a_local_llama_score_imports_neither_transformers_nor_pandas(tmp_path):
    folder = saved(tmp_path, "llama", {"num_key_value_heads": 2})
    code = (
        "import sys, json; from attngeom.cli import main; "
        f"code = main(['score', {str(folder)!r}, '-o', {str(tmp_path / 's.parquet')!r}, '--quiet']); "
        f"print(json.dumps([code, sorted(m for m in sys.modules if m.startswith({UNNEEDED!r}))]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout.splitlines()[-1]) == [0, []], result.stderr[-2000:]


@pytest.mark.parametrize("global_kv_heads", [1, 0])
def test_a_per_layer_head_count_is_checked_layer_by_layer(global_kv_heads, tmp_path):
    """EmbeddingGemma 2's global layers set their own kv heads (a per-layer attribute that transformers
    refuses to read globally): every layer's count is checked, a bad one refused."""
    from transformers import CONFIG_MAPPING

    if "embedding_gemma2_text" not in CONFIG_MAPPING:  # the minimum-versions run's transformers
        pytest.skip("this transformers predates per-layer attributes (EmbeddingGemma 2)")
    entries = {
        "model_type": "embedding_gemma2_text",
        **SIZES,
        "num_hidden_layers": 6,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": 128,
    }
    config = AutoConfig.for_model(**entries, num_global_key_value_heads=global_kv_heads)
    config.save_pretrained(tmp_path)
    if global_kv_heads:
        loaded = load_config(tmp_path / "config.json", "test")
        assert loaded.per_layer_config[5].num_key_value_heads == 1
    else:
        with pytest.raises(InputError, match="num_key_value_heads"):
            load_config(tmp_path / "config.json", "test")
