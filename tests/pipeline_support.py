"""What the pipeline tests share: tiny random models, a config writer, Snakemake in a subprocess, and
the tiny end-to-end run (a session fixture, through tests/conftest.py, so it runs once per session)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from transformers import BertConfig, BertModel

ROOT = Path(__file__).resolve().parents[1]

TINY_MODELS = [
    {
        "id": "google/bert_uncased_L-2_H-128_A-2",  # a reference id, so the comparison has rows
        "display": "BERT-tiny (random)",
        "random": {
            "model_type": "bert",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 256,
            "vocab_size": 100,
        },
        "objective": "bidirectional",
        "family": "BERT",
        "groups": ["table_s2", "table_s3", "figure_2"],
    },
    {
        "id": "meta-llama/Llama-3.2-1B",  # flagged in known_defects.csv
        "display": "Llama (random)",
        "random": {
            "model_type": "llama",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 256,
            "vocab_size": 100,
        },
        "objective": "autoregressive",
        "family": "Llama",
        "groups": ["table_s2", "table_s3", "figure_2"],
    },
    {
        "id": "random/vit",
        "random": {
            "model_type": "vit",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 256,
            "image_size": 32,
            "patch_size": 8,
        },
        "modality": "vision",
        "objective": "bidirectional",
        "groups": ["figure_s1"],
    },
    {
        "id": "random/t5",
        "random": {
            "model_type": "t5",
            "d_model": 128,
            "d_kv": 32,
            "num_heads": 4,
            "num_layers": 2,
            "d_ff": 256,
            "vocab_size": 100,
        },
        "objective": "encoder-decoder",
        "groups": ["figure_s2"],
    },
]


def run_snakemake(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile"), *args]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


def planned_jobs(output: str) -> list[tuple[str, str, str]]:
    """(rule, wildcards, resources) of every job in a dry-run's output (a group's jobs are indented)."""
    jobs: list[list[str]] = []
    for line in output.splitlines():
        match = re.match(r"^(?: {4})?(?:local)?rule (\w+):$", line)
        if match:
            jobs.append([match.group(1), "", ""])
        elif jobs and (match := re.match(r"^ {4}(?: {4})?(wildcards|resources): (.*)$", line)):
            jobs[-1][1 if match[1] == "wildcards" else 2] = match[2]
    return [tuple(job) for job in jobs]


def write_config(path: Path, models: list[dict]) -> Path:
    config = {
        "results": "results",
        "scoring": {"device": "cpu"},
        "figures": {
            "heatmap": {
                "encoder": {"model": "google/bert_uncased_L-2_H-128_A-2", "layer": 1},
                "decoder": {"model": "meta-llama/Llama-3.2-1B", "layer": 0},
            }
        },
        "models": models,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


BROKEN_MODELS = ["local/corrupt", "local/bad-heads", "local/missing", "random/bad-heads"]
"""Models of the tiny run that cannot be scored: a corrupt safetensors file, a config whose head
count is of the wrong type (an error of several lines inside transformers), a `path:` that does not
exist, and a random control whose settings the config class accepts but the model refuses."""


def broken_models(workdir: Path) -> list[dict]:
    corrupt = workdir / "corrupt-model"
    corrupt.mkdir()
    (corrupt / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
    (corrupt / "model.safetensors").write_bytes(b"this is not a safetensors file")
    bad_heads = workdir / "bad-heads-model"
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(bad_heads)
    settings = json.loads((bad_heads / "config.json").read_text())
    (bad_heads / "config.json").write_text(json.dumps({**settings, "num_attention_heads": "two"}))
    local = [
        {
            "id": model_id,
            "path": str(folder),
            "objective": "bidirectional",
            "groups": ["table_s2", "table_s3", "figure_2"],
        }
        for model_id, folder in zip(
            BROKEN_MODELS, (corrupt, bad_heads, workdir / "missing-model"), strict=False
        )
    ]
    unbuildable = {
        "id": "random/bad-heads",
        "random": {"model_type": "bert", "hidden_size": 30, "num_attention_heads": 4, "num_hidden_layers": 1},
        "objective": "bidirectional",
        "groups": ["table_s2", "table_s3", "figure_2"],
    }
    return [*local, unbuildable]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The workflow run once, end to end, on tiny random models plus two models that cannot be scored."""
    workdir = tmp_path_factory.mktemp("pipeline")
    config = write_config(workdir / "tiny.yaml", [*TINY_MODELS, *broken_models(workdir)])
    run_snakemake("all", "--cores", "2", "--configfile", str(config), cwd=workdir)
    return workdir
