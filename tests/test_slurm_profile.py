"""profiles/slurm as a cluster team sets it up, checked by dry runs (no SLURM needed; CI's real cluster runs
tests/test_slurm.py): the profile is a YTE template reading the partitions and the account from the
environment; CPU rules go to the CPU partition and the GPU rules (score_gpu, train) to the GPU one, and no
job that asks for a GPU is anywhere else, a zoo's included."""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import yte
from pipeline_support import ROOT, planned_jobs

from attngeom.pipeline.zoo import Zoo, pinned_text

PROFILE = ROOT / "profiles" / "slurm"
NAMES = {
    "ATTNGEOM_SLURM_CPU_PARTITION": "cpu-part",
    "ATTNGEOM_SLURM_GPU_PARTITION": "gpu-part",
    "ATTNGEOM_SLURM_ACCOUNT": "acct",
}
TINY_BERT = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
TINY_RUN = {
    "dataset": "sotu",
    "steps": 2,
    "n_layers": 1,
    "hidden_size": 16,
    "n_heads": 2,
    "intermediate_size": 32,
}


def rendered_profile(**env: str) -> dict:
    """profiles/slurm/config.yaml as Snakemake reads it: rendered by YTE in ``env``."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with open(PROFILE / "config.yaml") as handle:
            return yte.process_yaml(handle, require_use_yte=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def gpu_rules(profile: dict) -> set[str]:
    return {rule for rule, resources in profile["set-resources"].items() if "slurm_partition" in resources}


def slurm_dry_run(workdir: Path, config: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ATTNGEOM_SLURM")}
    environment.update(env, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
    command += ["--profile", str(PROFILE), "-n", "all", "--configfile", str(config)]
    return subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, timeout=600)


def pinned_zoo(folder: Path, sizes: list[int]) -> dict:
    """A zoo entry whose pinned list (written as `attngeom zoo resolve` would) holds a model of each size."""
    entry = {"name": "mixed", "limit": len(sizes)}
    models = [
        {
            "id": f"org/zoo-{i}",
            "revision": hashlib.sha1(str(i).encode()).hexdigest(),
            "model_type": "llama",
            "weights": "safetensors",
            "n_params": n,
        }
        for i, n in enumerate(sizes)
    ]
    zoo = Zoo.from_config(entry)
    (folder / zoo.pinned).parent.mkdir(parents=True, exist_ok=True)
    (folder / zoo.pinned).write_text(
        pinned_text(zoo, models, "https://huggingface.co", datetime.datetime.now(datetime.UTC))
    )
    return entry


def test_the_profile_reads_both_partitions_and_the_account_from_the_environment():
    profile = rendered_profile(**NAMES)
    assert profile["default-resources"]["slurm_partition"] == "'cpu-part'"
    assert profile["default-resources"]["slurm_account"] == "'acct'"
    assert gpu_rules(profile) == {"score_gpu", "train"}
    assert {profile["set-resources"][rule]["slurm_partition"] for rule in gpu_rules(profile)} == {
        "'gpu-part'"
    }
    unset = rendered_profile()  # unset: the plugin's fallbacks (the cluster's default partition)
    assert unset["default-resources"]["slurm_partition"] == "''"


@pytest.mark.slow  # 8-17 s on 2 cores
def test_a_dry_run_puts_cpu_rules_on_the_cpu_partition_and_gpu_rules_on_the_gpu_one(tmp_path):
    """A config with a model scored on a CPU, one scored on a GPU (by its size), a zoo with one model of
    each kind, and a training run on a GPU: every job's partition as its rule's kind says, and every job
    that asks for a GPU in a GPU rule."""
    config = {
        "results": "results",
        "scoring": {"device": "auto", "gpu_min_params": 7e9},
        "models": [
            {"id": "random/bert", "random": TINY_BERT, "objective": "bidirectional"},
            {"id": "org/huge", "objective": "autoregressive", "n_params": 7e10, "revision": "a" * 40},
        ],
        "zoo": pinned_zoo(tmp_path, [10**6, 8 * 10**9]),
        "training": {"defaults": TINY_RUN, "runs": [{"name": "on-gpu", "device": "cuda", "gpus": 1}]},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    done = slurm_dry_run(tmp_path, tmp_path / "c.yaml", NAMES)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = planned_jobs(done.stdout)
    on_gpu = gpu_rules(rendered_profile(**NAMES))
    seen = set()
    for rule, wildcards, text in jobs:
        resources = dict(item.split("=", 1) for item in text.split(", "))
        expected = "gpu-part" if rule in on_gpu else "cpu-part"
        assert resources["slurm_partition"] == expected, (rule, wildcards)
        assert resources["slurm_account"] == "acct"
        if int(resources.get("gpu", 0)):
            assert rule in on_gpu, (rule, wildcards)
            seen.add(wildcards)
    # the large listed model, the large zoo model (alone: a zoo batches only its CPU models), the training run
    assert seen == {"slug=org--huge", "slug=org--zoo-1", "run=on-gpu"}
    assert {rule for rule, _, _ in jobs} >= {"score", "score_gpu", "score_zoo", "train", "aggregate"}


def test_the_one_partition_variable_of_old_is_refused_in_one_line(tmp_path):
    """ATTNGEOM_SLURM_PARTITION once sent every rule to one partition: set, it stops the run, saying what
    to set instead, rather than being ignored."""
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"results": "results", "models": []}))
    done = slurm_dry_run(tmp_path, tmp_path / "c.yaml", {"ATTNGEOM_SLURM_PARTITION": "gpu"})
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if "ATTNGEOM_SLURM_PARTITION" in line]
    assert "export ATTNGEOM_SLURM_CPU_PARTITION and ATTNGEOM_SLURM_GPU_PARTITION" in line
