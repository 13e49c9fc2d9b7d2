"""The CLI on good and bad input: one clear line, exit code 2, and no output file left behind."""

import os
import shutil
import subprocess
import sys

import pytest
import torch
from conformance import build, tiny_config
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

from attngeom.cli import main
from attngeom.records import COLUMNS, read_scores


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    config = tiny_config(
        "bert",
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=32,
        vocab_size=50,
    )
    build(config).save_pretrained(path)
    return path


def run_cli(args, capsys):
    code = main(args)
    return code, capsys.readouterr()


def test_score_writes_parquet_and_summary(bert_dir, tmp_path, capsys):
    out = tmp_path / "scores.parquet"
    code, captured = run_cli(["score", str(bert_dir), "-o", str(out), "--dtype", "float32"], capsys)
    assert code == 0
    frame = read_scores(out)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == 2 * (4 + 1)
    assert "symmetry median" in captured.out and "encoder" in captured.out
    assert not list(tmp_path.glob("*.tmp"))


def test_bin_checkpoint_directory_scores_like_safetensors(bert_dir, tmp_path, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(bert_dir / "config.json", bin_dir)
    torch.save(load_file(bert_dir / "model.safetensors"), bin_dir / "pytorch_model.bin")
    code, _ = run_cli(["score", str(bin_dir), "-o", str(tmp_path / "a.parquet"), "--quiet"], capsys)
    assert code == 0
    run_cli(["score", str(bert_dir), "-o", str(tmp_path / "b.parquet"), "--quiet"], capsys)
    a, b = read_scores(tmp_path / "a.parquet"), read_scores(tmp_path / "b.parquet")
    assert a["symmetry"].tolist() == b["symmetry"].tolist()
    assert a["n_params"].iloc[0] == b["n_params"].iloc[0] > 0


def test_sharded_safetensors_reads_only_qk_tensors(tmp_path):
    from attngeom.engine import score_source
    from attngeom.sources import open_source

    config = tiny_config(
        "llama",
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        intermediate_size=32,
        vocab_size=50,
    )
    build(config).save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    source = open_source(tmp_path)
    frame = score_source(source, progress=False)
    assert sorted(source.loaded) == sorted(
        f"layers.{i}.self_attn.{p}_proj.weight" for i in range(3) for p in "qk"
    )
    assert len(frame) == 3 * 5


def bad_inputs(tmp_path, bert_dir):
    """(name, path) pairs that must each be refused."""
    truncated = tmp_path / "truncated"
    shutil.copytree(bert_dir, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    corrupted = tmp_path / "corrupted"
    shutil.copytree(bert_dir, corrupted)
    raw = bytearray((corrupted / "model.safetensors").read_bytes())
    raw[8:40] = b"#" * 32
    (corrupted / "model.safetensors").write_bytes(bytes(raw))
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(bert_dir / "config.json", no_weights)
    no_attention = tmp_path / "mamba"
    AutoModel.from_config(
        AutoConfig.for_model("mamba", hidden_size=16, num_hidden_layers=1, vocab_size=20, state_size=4)
    ).save_pretrained(no_attention)
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text('{"model_type": "not-a-model"}')
    shutil.copy(bert_dir / "model.safetensors", unknown)  # weights it has; its type is what is refused
    nan = tmp_path / "nan"
    shutil.copytree(bert_dir, nan)
    tensors = load_file(nan / "model.safetensors")
    key = next(k for k in tensors if k.endswith("layer.1.attention.self.key.weight"))
    tensors[key][0, 0] = float("nan")
    save_file(tensors, nan / "model.safetensors", metadata={"format": "pt"})
    return {
        "missing path": (tmp_path / "does-not-exist", "no such file or directory"),
        "truncated safetensors": (truncated, "corrupted or truncated"),
        "corrupted safetensors": (corrupted, "corrupted or truncated"),
        "no weights": (no_weights, "no weights"),
        "no attention": (no_attention, "unsupported model_type 'mamba'"),
        "unsupported model_type": (unknown, "unsupported model_type 'not-a-model'"),
        "nan weights": (nan, "NaN or infinite"),
        "not a model file": (bert_dir / "config.json", "not a model directory"),
    }


def test_bad_inputs_fail_cleanly(tmp_path, bert_dir, capsys):
    for name, (path, message) in bad_inputs(tmp_path, bert_dir).items():
        out = tmp_path / f"{name}.parquet"
        code, captured = run_cli(["score", str(path), "-o", str(out)], capsys)
        assert code == 2, name
        lines = captured.err.strip().splitlines()
        assert lines[-1].startswith("attngeom: error: ") and message in lines[-1], (name, captured.err)
        assert str(path) in lines[-1], name
        assert not out.exists(), name
        assert not list(tmp_path.glob(f".{name}.parquet*")), name


def test_hub_id_unresolvable_offline_exits_2(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    out = tmp_path / "x.parquet"
    result = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "score", "someone/some-model", "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("attngeom: error: someone/some-model:") and "offline" in last
    assert not out.exists()


@pytest.mark.parametrize(("env_threads", "expected"), [(None, 8), ("16", 16)])
def test_score_caps_the_math_threads_unless_omp_num_threads_is_set(bert_dir, tmp_path, env_threads, expected):
    """At most 8 threads for the math (more cost more than they give on these sizes); OMP_NUM_THREADS wins."""
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    if env_threads:
        env["OMP_NUM_THREADS"] = env_threads
    code = (
        "import torch; torch.set_num_threads(16); from attngeom.cli import main; "
        f"code = main(['score', {str(bert_dir)!r}, '-o', {str(tmp_path / 's.parquet')!r}, '--quiet']); "
        "print(code, torch.get_num_threads())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.split() == ["0", str(expected)], result.stderr[-2000:]
