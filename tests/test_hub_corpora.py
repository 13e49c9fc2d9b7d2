"""The paper's corpora (dataset=wikipedia|jigsaw|red_pajama) streamed through ``datasets`` from a local
Hub emulation (tests/datasetserver.py: dataset repositories of Parquet files, RedPajama-V2's Parquet
export on its ``refs/convert/parquet`` branch beside a loading script on main), through ``attngeom train``
and through the pipeline's train job; a ``@<commit>`` setting reads that commit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from datasetserver import commit_of, serving
from training_fixtures import TINY, sentences

from attngeom.training.documents import SUBSTITUTES

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = {"wikipedia": "text", "jigsaw": "comment_text", "red_pajama": "raw_content"}
OLD_JIGSAW = "an older upload"


def parquet(path: Path, column: str, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: texts, "id": list(range(len(texts)))}), path)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The three repositories as the Hub lays them out (other configs beside the one read)."""
    root = tmp_path_factory.mktemp("hub")
    parquet(root / "wiki/20231101.en/train-00000-of-00001.parquet", "text", sentences(300, 1))
    parquet(root / "wiki/20231101.fr/train-00000-of-00001.parquet", "text", ["le mauvais dossier"] * 5)
    parquet(root / "jigsaw/data/train-00000-of-00001.parquet", "comment_text", sentences(300, 2))
    parquet(root / "jigsaw-old/data/train-00000-of-00001.parquet", "comment_text", [OLD_JIGSAW] * 300)
    parquet(root / "rp/sample/partial-train/0000.parquet", "raw_content", sentences(300, 3))
    parquet(root / "rp/default/partial-train/0000.parquet", "raw_content", ["the wrong subset"] * 5)
    (root / "rp-main").mkdir()
    (root / "rp-main/RedPajama-Data-V2.py").write_text("# a loading script: datasets >= 3 cannot run it\n")
    repos = {
        "wikimedia/wikipedia": {"main": root / "wiki"},
        "monology/jigsaw": {"main": root / "jigsaw", "v0": root / "jigsaw-old"},
        "togethercomputer/RedPajama-Data-V2": {"main": root / "rp-main", "refs/convert/parquet": root / "rp"},
    }
    with serving(repos) as server:
        yield server


def environment(hub, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_OFFLINE"))}
    return env | {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "OMP_NUM_THREADS": "1"}


def train(hub, tmp_path: Path, dataset: str) -> subprocess.CompletedProcess:
    settings = [f"{k}={v}" for k, v in TINY.items()]
    attngeom = str(Path(sys.executable).with_name("attngeom"))
    command = [attngeom, "train", "--quiet", "--out", str(tmp_path / "run"), *settings]
    command += [f"dataset={dataset}", f"cache_dir={tmp_path / 'cache'}", "steps=2", "batch_size=2"]
    command += ["grad_accum=1", "max_documents=200"]
    return subprocess.run(
        command, env=environment(hub, tmp_path / "home"), capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # a training subprocess each (~15 s)
@pytest.mark.parametrize(
    ("dataset", "read"),
    [
        ("wikipedia", "/datasets/wikimedia/wikipedia/resolve/{main}/20231101.en/"),
        ("jigsaw", "/datasets/monology/jigsaw/resolve/{main}/data/"),
        ("red_pajama", "/datasets/togethercomputer/RedPajama-Data-V2/resolve/{parquet}/sample/"),
    ],
)
def test_attngeom_train_streams_each_paper_corpus_from_the_hub(hub, tmp_path, dataset, read):
    hub.requests.clear()
    done = train(hub, tmp_path, dataset)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "loss.parquet").is_file() and (tmp_path / "run" / "final").is_dir()
    repo = read.split("/")[2] + "/" + read.split("/")[3]
    prefix = read.format(main=commit_of(repo, "main"), parquet=commit_of(repo, "refs/convert/parquet"))
    files = [r.split(" ", 1)[1] for r in hub.requests if r.startswith("GET /datasets/")]
    parquets = [f for f in files if f.endswith(".parquet")]
    assert parquets and all(f.startswith(prefix) for f in parquets), parquets  # that folder, that branch
    assert dataset in SUBSTITUTES and not any(f.endswith(".py") for f in files)  # no script was fetched


@pytest.mark.slow
def test_a_pinned_commit_is_what_is_read(hub, tmp_path):
    hub.requests.clear()
    old = commit_of("monology/jigsaw", "v0")
    done = train(hub, tmp_path, f"jigsaw@{old}")
    assert done.returncode == 0, done.stderr[-3000:]
    parquets = [r for r in hub.requests if r.startswith("GET /datasets/") and r.endswith(".parquet")]
    assert parquets and all(f"/resolve/{old}/" in r for r in parquets)
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["dataset"] == f"jigsaw@{old}"


def test_an_unknown_commit_is_a_one_line_error(hub, tmp_path):
    done = train(hub, tmp_path, "jigsaw@0123456789abcdef0123456789abcdef01234567")
    assert done.returncode == 2 and done.stderr.startswith("attngeom: error: ")
    assert "Traceback" not in done.stderr and not (tmp_path / "run" / "final").exists()


@pytest.mark.slow
def test_the_pipeline_trains_on_a_hub_corpus(hub, tmp_path):
    """The train job of a config whose run streams red_pajama, run by Snakemake (only that job)."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text()) | {
        "training": {
            "defaults": {**TINY, "dataset": "red_pajama", "steps": 2, "batch_size": 2, "grad_accum": 1},
            "runs": [{"name": "rp-enc", "objective": "encoder", "init": "random", "max_documents": 200}],
        },
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "snakemake", "results/training/rp-enc/final", "--cores", "1"]
    command += ["--snakefile", str(ROOT / "workflow" / "Snakefile"), "--configfile", "c.yaml"]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=environment(hub, tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert (tmp_path / "results/training/rp-enc/loss.parquet").is_file()
    parquet_branch = commit_of("togethercomputer/RedPajama-Data-V2", "refs/convert/parquet")
    assert any(r.endswith(".parquet") and f"/{parquet_branch}/sample/" in r for r in hub.requests)
    corpus = (tmp_path / "results/training/rp-enc/corpus.json").read_text()
    assert SUBSTITUTES["red_pajama"] in corpus
