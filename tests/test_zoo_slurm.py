"""A zoo query through the SLURM profile: a few sbatch jobs for many models, every model recorded.

Needs the CI cluster of .ci/slurm/up.sh and ATTNGEOM_SLURM=1, as tests/test_slurm.py (whose helpers read
the Snakemake log and sacct); skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT
from test_slurm import check_every_job_went_through_sbatch, job_env, snakemake_command, submissions
from zoo_repos import make_zoo

N = 80
"""Models of the zoo: two batches of the default 50, so at most N / 20 = 4 sbatch jobs are allowed."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("ATTNGEOM_SLURM") != "1",
        reason="needs a running SLURM: run .ci/slurm/up.sh as root and set ATTNGEOM_SLURM=1 (.ci/run does both)",
    ),
]


def test_a_zoo_goes_through_sbatch_in_a_twentieth_as_many_jobs_as_models(tmp_path):
    emulated = make_zoo(tmp_path / "hub", N)
    work = tmp_path / "work"
    work.mkdir()
    (work / "zoo.yaml").write_text(yaml.safe_dump({"zoo": {"name": "ci", "limit": N}}))
    server = emulated.server()
    with server.running():
        env = {
            **job_env(),
            "HF_ENDPOINT": server.url,
            "HF_HOME": str(tmp_path / "hf"),
            "ATTNGEOM_CACHE": str(tmp_path / "cache"),
            "HF_HUB_DISABLE_XET": "1",
        }
        resolve = [sys.executable, "-m", "attngeom.cli", "zoo", "resolve", "zoo.yaml"]
        subprocess.run(resolve, cwd=work, env=env, check=True, capture_output=True, timeout=300)
        run = subprocess.run(
            snakemake_command(
                ROOT / "workflow" / "Snakefile", work, "all", "--configfile", str(work / "zoo.yaml")
            ),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
    assert run.returncode == 0, run.stderr[-4000:]
    jobs = check_every_job_went_through_sbatch(run.stderr, work)
    assert (jobs["State"] == "COMPLETED").all(), jobs
    assert len(jobs) <= N / 20, [s.rule for s in submissions(run.stderr)]
    models = pd.read_csv(work / "results" / "aggregate" / "models.csv", keep_default_na=False)
    assert sorted(models["model"]) == sorted(emulated.repos)
    for row in models.itertuples(index=False):  # the failing models of a batch did not stop the others
        assert row.status == emulated.outcomes[row.model].outcome, row
