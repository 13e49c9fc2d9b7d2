"""The scoring engine and CLI under bad input and odd sources: identical weights score identically,
nothing the user owns is overwritten, every bad input is one line and exit code 2 before any work."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from conformance import build, tiny_config
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

import attngeom
from attngeom.architectures import REGISTRY, UnscoredLayer, architecture_for
from attngeom.cli import main, summary
from attngeom.errors import InputError
from attngeom.files import slug
from attngeom.records import COLUMNS, read_scores
from attngeom.sources import open_source

ROOT = Path(__file__).resolve().parents[1]
SCORES = ["stack", "layer", "head", "symmetry", "directionality", "norm"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-bert"
    config = tiny_config(
        "bert",
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=3,
        intermediate_size=32,
        vocab_size=50,
    )
    build(config).save_pretrained(path)
    return path


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    """Exit code and the one line of stderr the CLI printed last."""
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def digest(path: Path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()


# --- identical weights, identical scores, whatever the source -------------------------------------------------


def misaligned_transposed(w: torch.Tensor) -> torch.Tensor:
    """The same values in a buffer laid out column-major and starting one element into its storage."""
    buffer = torch.empty(w.numel() + 1, dtype=w.dtype)
    return buffer[1:].view(w.shape[1], w.shape[0]).copy_(w.T).T


def test_identical_weights_score_bit_identically_from_every_source(bert_dir, tmp_path):
    """Every factor is copied into a fresh contiguous float64 tensor before any arithmetic, so equal
    values give equal bits by construction: the equality below is exact, not a tolerance."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(bert_dir / "config.json", bin_dir)
    torch.save(load_file(bert_dir / "model.safetensors"), bin_dir / "pytorch_model.bin")
    in_memory = AutoModel.from_pretrained(bert_dir, dtype=torch.float64)
    odd_layout = AutoModel.from_pretrained(bert_dir, dtype=torch.float64)
    with torch.no_grad():
        for name, param in odd_layout.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                param.data = misaligned_transposed(param.data)
    assert not odd_layout.encoder.layer[0].attention.self.query.weight.is_contiguous()
    reference = attngeom.score(bert_dir, progress=False)[SCORES]
    for model in (bin_dir, in_memory, odd_layout):
        assert reference.equals(attngeom.score(model, progress=False)[SCORES]), model


def test_float32_weights_score_like_their_float64_widening(bert_dir, tmp_path):
    """Widening float32 to float64 is exact, so a float32 checkpoint and its float64 copy are the same input."""
    narrow, wide = tmp_path / "f32", tmp_path / "f64"
    AutoModel.from_pretrained(bert_dir, dtype=torch.float32).save_pretrained(narrow)
    AutoModel.from_pretrained(narrow, dtype=torch.float32).double().save_pretrained(wide)
    a, b = (attngeom.score(p, progress=False)[SCORES] for p in (narrow, wide))
    assert a.equals(b)


# --- the output path: checked before any work, never the model, never a device or a folder ---------------------


def write_gguf(path: Path, seed: int = 0) -> Path:
    """A tiny llama GGUF (2 layers, 4 heads, 2 kv heads) with float32 q/k."""
    rng = np.random.default_rng(seed)
    d, kv_rows = 32, 16
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_vocab_size(64)
    for i in range(2):
        writer.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((d, d), dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_k.weight", rng.standard_normal((kv_rows, d), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def gguf_copy(tmp_path) -> Path:
    return write_gguf(tmp_path / "m.gguf")


def test_output_that_is_the_gguf_being_read_is_refused(gguf_copy, capsys):
    before = digest(gguf_copy)
    code, line = run_cli(["score", gguf_copy, "-o", gguf_copy], capsys)
    assert code == 2 and line.startswith("attngeom: error: output") and "model being read" in line
    assert digest(gguf_copy) == before
    assert sorted(p.name for p in gguf_copy.parent.iterdir()) == ["m.gguf"]


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_output_inside_the_model_folder_is_refused(bert_dir, tmp_path, capsys, name):
    model = tmp_path / "model"
    shutil.copytree(bert_dir, model)
    before = digest(model)
    code, line = run_cli(["score", model, "-o", model / name], capsys)
    assert code == 2 and "model being read" in line, line
    assert digest(model) == before


def special_outputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    return {
        "device": (Path("/dev/full"), "not a regular file"),
        "fifo": (fifo, "not a regular file"),
        "folder": (folder, "is a folder"),
        "sysfs": (Path("/sys/attngeom-scores.parquet"), "cannot write in /sys"),
        "below a file": (tmp_path / "fifo" / "x.parquet", "output"),
    }


def test_special_outputs_are_refused_before_any_work(bert_dir, tmp_path, capsys):
    """A missing model would fail on reading: the output error comes first, so the check ran first."""
    for name, (output, message) in special_outputs(tmp_path).items():
        kind = stat.S_IFMT(output.stat().st_mode) if output.exists() else None
        for model in (bert_dir, tmp_path / "no-such-model"):
            code, line = run_cli(["score", model, "-o", output], capsys)
            assert code == 2 and line.startswith("attngeom: error: output") and message in line, (name, line)
        assert kind is None or stat.S_IFMT(output.stat().st_mode) == kind, name
    assert not Path("/sys/attngeom-scores.parquet").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder whatever its mode")
def test_read_only_folder_is_refused_before_scoring(bert_dir, tmp_path, capsys):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    code, line = run_cli(["score", bert_dir, "-o", folder / "s.parquet"], capsys)
    folder.chmod(0o755)
    assert code == 2 and "cannot write" in line
    assert not list(folder.iterdir())


def test_result_gets_the_users_umask(bert_dir, tmp_path, capsys):
    old = os.umask(0o027)
    try:
        code, _ = run_cli(["score", bert_dir, "-o", tmp_path / "s.parquet", "--quiet"], capsys)
    finally:
        os.umask(old)
    assert code == 0 and stat.S_IMODE((tmp_path / "s.parquet").stat().st_mode) == 0o640


def _small_file_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


def test_failed_write_is_one_line_and_leaves_no_file(bert_dir, tmp_path):
    """The output passed its check but the write fails (here: the process may write at most 1 KiB)."""
    out = tmp_path / "s.parquet"
    result = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "score", str(bert_dir), "-o", str(out), "--quiet"],
        capture_output=True,
        text=True,
        preexec_fn=_small_file_limit,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attngeom: error: cannot write {out}: ")
    assert "File too large" in lines[0]
    assert not list(tmp_path.iterdir())


# --- settings validated where they enter ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "message"),
    [("tpu", "not a torch device"), ("meta", "not supported"), ("cuda", "no CUDA device")],
)
def test_bad_device_is_one_line(bert_dir, tmp_path, capsys, device, message):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    code, line = run_cli(["score", bert_dir, "-o", tmp_path / "s.parquet", "--device", device], capsys)
    assert code == 2 and line.startswith(f"attngeom: error: device {device!r}") and message in line
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"dtype": torch.bfloat16}, "float32 or torch.float64"),
        ({"dtype": torch.int64}, "float32 or torch.float64"),
        ({"gamma": float("nan")}, "finite number"),
        ({"gamma": -1.0}, "≥ 0"),
        ({"gamma": float("inf")}, "finite number"),
        ({"gamma": True}, "finite number"),
        ({"variant": "eq15"}, "unknown directionality variant"),
        ({"device": "tpu"}, "not a torch device"),
    ],
)
def test_api_rejects_bad_settings(bert_dir, setting, message):
    with pytest.raises(InputError, match=message):
        attngeom.score(bert_dir, progress=False, **setting)


@pytest.fixture(scope="module")
def huge_dir(bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT with layer 1's query and key weights near float32's largest value (3.4e38)."""
    path = tmp_path_factory.mktemp("models") / "huge"
    shutil.copytree(bert_dir, path)
    tensors = load_file(path / "model.safetensors")
    for name in tensors:
        if re.search(r"layer\.1\.attention\.self\.(query|key)\.weight$", name):
            tensors[name] = torch.sign(tensors[name]) * 3e38
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


def test_float32_overflow_is_an_error_naming_the_layer(huge_dir, tmp_path, capsys):
    out = tmp_path / "s.parquet"
    code, line = run_cli(["score", huge_dir, "-o", out, "--dtype", "float32"], capsys)
    assert (
        code == 2 and "encoder layer 1" in line and "overflow float32" in line and "--dtype float64" in line
    )
    assert not out.exists()
    code, _ = run_cli(["score", huge_dir, "-o", out, "--dtype", "float64", "--quiet"], capsys)
    scores = read_scores(out)
    assert code == 0 and scores[["directionality", "norm"]].notna().all().all()
    assert torch.isfinite(torch.tensor(scores[["symmetry", "directionality", "norm"]].to_numpy(float))).all()


# --- the model id the records carry -----------------------------------------------------------------------------


def test_model_id_flag_names_the_records(bert_dir, tmp_path, capsys):
    code, _ = run_cli(
        ["score", bert_dir, "-o", tmp_path / "a.parquet", "--model-id", "org/tiny", "--quiet"], capsys
    )
    assert code == 0 and set(read_scores(tmp_path / "a.parquet")["model_id"]) == {"org/tiny"}
    code, _ = run_cli(["score", bert_dir, "-o", tmp_path / "b.parquet", "--quiet"], capsys)
    assert code == 0 and set(read_scores(tmp_path / "b.parquet")["model_id"]) == {
        open_source(bert_dir).model_id
    }
    code, line = run_cli(["score", bert_dir, "-o", tmp_path / "c.parquet", "--model-id", " "], capsys)
    assert code == 2 and "--model-id is empty" in line


def test_several_models_write_one_file_each_in_one_process(gguf_copy, tmp_path, capsys):
    folder, other = tmp_path / "scores", write_gguf(tmp_path / "other model.gguf", seed=1)
    missing = tmp_path / "no-such-model"
    code = main(["score", str(gguf_copy), str(missing), str(other), "-o", str(folder), "--quiet"])
    errors = capsys.readouterr().err.strip().splitlines()
    assert code == 2  # one model failed, and the other two are written
    assert len(errors) == 1 and errors[0].startswith(f"attngeom: error: {missing}")
    ids = [open_source(p).model_id for p in (gguf_copy, other)]
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{slug(i)}.parquet" for i in ids)
    for model_id in ids:
        assert set(read_scores(folder / f"{slug(model_id)}.parquet")["model_id"]) == {model_id}


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--model-id", "x"], "--model-id names one model"), ([], "need -o FOLDER")],
)
def test_several_models_refuse_one_model_options(bert_dir, tmp_path, capsys, extra, message):
    args = ["score", bert_dir, bert_dir, *extra] + (["-o", tmp_path / "out"] if "--model-id" in extra else [])
    code, line = run_cli(args, capsys)
    assert code == 2 and message in line
    assert not (tmp_path / "out").exists()


# --- layers that exist but are not a bilinear form --------------------------------------------------------------


def test_unscored_layer_is_recorded_and_the_rest_scored(bert_dir, tmp_path, monkeypatch, capsys):
    """A hybrid model: layer 1 is not attention. It gets one row saying why; medians ignore it."""
    bert = architecture_for(AutoConfig.from_pretrained(bert_dir))  # discovered: no table holds BERT

    def hybrid_layers(config, reader):
        for layer in bert.layers(config, reader):
            yield UnscoredLayer(layer.stack, 1, "a state-space block") if layer.layer == 1 else layer

    monkeypatch.setitem(REGISTRY, "bert", dataclasses.replace(bert, layers=hybrid_layers))
    out = tmp_path / "s.parquet"
    code, _ = run_cli(["score", bert_dir, "-o", out, "--quiet"], capsys)
    frame = read_scores(out)
    assert code == 0 and list(frame.columns) == COLUMNS
    unscored = frame[frame["layer"] == 1]
    assert len(unscored) == 1 and unscored["head"].isna().all()
    assert unscored[["symmetry", "directionality", "norm", "n_heads"]].isna().all().all()
    assert unscored["not_scored"].tolist() == ["a state-space block"]
    scored = frame[frame["layer"] != 1]
    assert scored["not_scored"].isna().all() and scored[["directionality", "norm"]].notna().all().all()
    assert len(scored) == 2 * (4 + 1)
    table = summary(frame)
    layers = scored[scored["head"].isna()]
    assert table.loc["encoder", "layers"] == 2
    assert table.loc["encoder", "symmetry median"] == pytest.approx(layers["symmetry"].median(), rel=1e-12)


# --- the README says what the records hold -----------------------------------------------------------------------


def test_readme_schema_table_lists_the_records_columns():
    readme = (ROOT / "docs" / "scores.md").read_text()
    section = readme.split("## The Parquet schema", 1)[1].split("\n## ", 1)[0]
    names = [
        name.strip()
        for row in re.findall(r"^\| ([^|]+) \|", section, flags=re.M)
        for name in row.split(",")
        if name.strip() not in ("column", "---")
    ]
    assert names == COLUMNS
