"""A zoo query end to end: `attngeom zoo resolve`, then Snakemake (profiles/local) over the hub-like server.

The DAG reads only the pinned list (offline), the models are scored in batches, every repository gets the
status its kind calls for with the scores its files give, and the tables and figures are made. A zoo's
config mistakes are refused when the DAG is built.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT, planned_jobs, run_snakemake
from zoo_repos import make_zoo

import attngeom
from attngeom.pipeline.registry import slug
from attngeom.pipeline.zoo import Zoo, pinned_text

N, BATCH = 30, 12
pytestmark = pytest.mark.slow


def snakemake(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo_pipeline")
    emulated = make_zoo(root / "hub", N)
    work = root / "work"
    work.mkdir()
    entry = {"name": "tiny", "limit": N, "batch_size": BATCH}
    (work / "zoo.yaml").write_text(yaml.safe_dump({"scoring": {"device": "cpu"}, "zoo": entry}))
    server = emulated.server()
    with server.running():
        env = {
            **os.environ,
            "HF_ENDPOINT": server.url,
            "HF_HOME": str(root / "hf"),
            "ATTNGEOM_CACHE": str(root / "cache"),
            "HF_HUB_DISABLE_XET": "1",
            "OMP_NUM_THREADS": "1",
        }
        resolved = subprocess.run(
            [sys.executable, "-m", "attngeom.cli", "zoo", "resolve", "zoo.yaml"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert resolved.returncode == 0, resolved.stderr
        run = snakemake(
            "--profile",
            str(ROOT / "profiles" / "local"),
            "--cores",
            "2",
            "all",
            "--configfile",
            "zoo.yaml",
            cwd=work,
            env=env,
        )
    assert run.returncode == 0, run.stderr[-4000:]
    return emulated, work, run.stderr, {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}


def test_every_repository_gets_the_status_its_kind_calls_for(zoo_run):
    emulated, work, _, _ = zoo_run
    models = pd.read_csv(work / "results" / "aggregate" / "models.csv", keep_default_na=False)
    assert sorted(models["model"]) == sorted(emulated.repos)
    for row in models.itertuples(index=False):
        kind = emulated.outcomes[row.model]
        assert row.status == kind.outcome, row
        assert kind.reason in row.reason and "\n" not in row.reason, row
    summary = pd.read_csv(work / "results" / "tables" / "summary.csv", keep_default_na=False)
    assert set(summary["model"]) == set(emulated.repos)
    for figure in ("figure_2", "figure_s1", "figure_s2"):
        assert (work / "results" / "figures" / f"{figure}.png").stat().st_size > 0


def test_scores_are_those_of_the_pinned_files_read_from_disk(zoo_run):
    emulated, work, _, _ = zoo_run
    scores = pd.read_parquet(work / "results" / "aggregate" / "scores.parquet")
    for name in ("bert", "llama-sharded", "gpt2-bin", "t5", "whisper", "llama-gguf"):
        repo = next(r for r, k in emulated.outcomes.items() if k.name == name)
        path = emulated.repos[repo]
        local = attngeom.score(path / "tiny.Q8_0.gguf" if name == "llama-gguf" else path, progress=False)
        ours = scores[scores["model_id"] == repo].reset_index(drop=True)
        assert set(ours["revision"]) == {emulated.commits[repo]}
        assert len(ours) == len(local) > 0
        for metric in ("symmetry", "directionality"):
            assert ours[metric].to_numpy() == pytest.approx(local[metric].to_numpy(), abs=1e-12, nan_ok=True)


def test_a_zoo_is_scored_in_batches_not_a_job_per_model(zoo_run):
    emulated, work, log, _ = zoo_run
    rules = re.findall(r"^(?:local)?rule (\w+):$", log, flags=re.M)
    assert sorted(r for r in rules if r.startswith("score")) == ["score_zoo"] * math.ceil(N / BATCH)
    batches = [f"cpu{i:03d}" for i in range(math.ceil(N / BATCH))]
    folder = work / "results" / "scores"
    assert sorted(p.name for p in folder.iterdir()) == ["zoo"]  # no file of its own for a zoo model
    statuses = [s for b in batches for s in json.loads((folder / "zoo" / f"{b}.status.json").read_text())]
    assert sorted(s["model"] for s in statuses) == sorted(emulated.repos)
    rows = pd.concat([pd.read_parquet(folder / "zoo" / f"{b}.parquet") for b in batches])
    assert set(rows["model_id"]) == {s["model"] for s in statuses if s["status"] == "ok"}
    first = (work / "results" / "logs" / "score_zoo" / "cpu000.log").read_text()
    assert first.count("\n== ") + first.startswith("== ") == BATCH  # each model's log, in turn


def test_a_rerun_reads_the_pinned_list_offline_and_has_nothing_to_do(zoo_run):
    _, work, _, offline = zoo_run
    again = snakemake("-n", "all", "--configfile", "zoo.yaml", cwd=work, env=offline)
    assert again.returncode == 0, again.stderr
    assert "Nothing to be done" in again.stdout + again.stderr


def pinned_config(folder: Path, n: int, **entry) -> Path:
    """A config whose zoo's pinned list of ``n`` models (no server: written as `zoo resolve` would)."""
    zoo = Zoo.from_config({"name": "big", "limit": n, **entry})
    types = ["llama", "bert", "qwen2", "gpt2", "t5", "vit", "whisper", "mamba"]
    models = [
        {
            "id": f"org-{i % 50:02d}/model-{i:05d}",
            "revision": hashlib.sha1(str(i).encode()).hexdigest(),
            "model_type": types[i % len(types)],
            "weights": "safetensors",
            "n_params": 10**6 * (1 + i % 100),
        }
        for i in range(n)
    ]
    pinned = folder / zoo.pinned
    pinned.parent.mkdir(parents=True, exist_ok=True)
    pinned.write_text(pinned_text(zoo, models, "https://huggingface.co", datetime.datetime.now(datetime.UTC)))
    config = folder / "zoo.yaml"
    config.write_text(yaml.safe_dump({"zoo": {"name": "big", "limit": n, **entry}}))
    return config


def test_a_thousand_pinned_models_are_twenty_scoring_jobs_and_one_of_each_aggregate(tmp_path):
    pinned_config(tmp_path, 1000)
    dry = run_snakemake("all", "-n", "--configfile", "zoo.yaml", cwd=tmp_path)
    jobs = planned_jobs(dry.stdout)
    counts = pd.Series([rule for rule, _, _ in jobs]).value_counts()
    assert counts["score_zoo"] == 20 and "score" not in counts and "figure_heads" not in counts
    assert {wildcards for rule, wildcards, _ in jobs if rule == "score_zoo"} == {
        f"batch=cpu{i:03d}" for i in range(20)
    }
    assert counts["aggregate"] == counts["tables"] == counts["figure_2"] == 1
    one = run_snakemake(
        "results/scores/zoo/cpu007.status.json", "-n", "--configfile", "zoo.yaml", cwd=tmp_path
    )
    assert [(rule, wildcards) for rule, wildcards, _ in planned_jobs(one.stdout)] == [
        ("score_zoo", "batch=cpu007")
    ]


def test_a_zoo_models_per_head_figure_reads_its_batchs_records(tmp_path):
    pinned_config(tmp_path, 120, heads_figures=True)
    model = slug("org-07/model-00007")
    dry = run_snakemake(f"results/figures/heads/{model}.png", "-n", "--configfile", "zoo.yaml", cwd=tmp_path)
    rules = sorted(rule for rule, _, _ in planned_jobs(dry.stdout))
    assert rules == ["figure_heads", "score_zoo"]  # the batch that holds it, then its figure


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            lambda c: c["zoo"].update(pipeline="text-generation"),
            "config: zoo: unknown key 'pipeline' (did you mean 'pipeline_tag'?)",
        ),
        (lambda c: c["zoo"].update(limit=5), "was resolved for another query (differs in limit)"),
        (
            lambda c: c["zoo"].update(name="other"),
            "no pinned list config/zoo/other.yaml; run `attngeom zoo resolve",
        ),
        (lambda c: c["zoo"].pop("limit"), "'limit' is a required property"),
    ],
    ids=["unknown setting", "query changed", "never resolved", "no limit"],
)
def test_a_zoo_mistake_is_refused_when_the_dag_is_built(tmp_path, change, expected):
    config = pinned_config(tmp_path, 4)
    data = yaml.safe_load(config.read_text())
    change(data)
    config.write_text(yaml.safe_dump(data))
    result = run_snakemake("all", "-n", "--configfile", "zoo.yaml", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr
