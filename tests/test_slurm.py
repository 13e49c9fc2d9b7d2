"""The SLURM path, run for real: workflows go through ``--profile profiles/slurm`` on the cluster that
.ci/slurm/up.sh starts (two nodes, both this machine), and sacct is asked what SLURM actually ran.

Needs that cluster and ATTNGEOM_SLURM=1 (.ci/run does both); skipped otherwise.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml
import yte

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "slurm"
TEST_WORKFLOW = ROOT / "tests" / "slurm" / "Snakefile"
SACCT_FIELDS = ("JobIDRaw", "Comment", "State", "Partition", "Account", "WorkDir")
SACCT_FIELDS += ("ReqMem", "ReqCPUS", "ReqTRES", "Timelimit")
CORES = str(os.cpu_count())
"""The CI node's CPUs, passed as --cores: a group job is no wider (the profile's 8 suit a real node)."""
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("ATTNGEOM_SLURM") != "1",
        reason="needs a running SLURM: run .ci/slurm/up.sh as root and set ATTNGEOM_SLURM=1 (.ci/run does both)",
    ),
]


def ci_settings() -> dict[str, str]:
    """The CI override: partitions and account of the CI cluster, from .ci/slurm/ci.env."""
    lines = (ROOT / ".ci" / "slurm" / "ci.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def profile_gpu_rules() -> set[str]:
    """The rules that profiles/slurm sends to the GPU partition (its set-resources' slurm_partition)."""
    with open(PROFILE / "config.yaml") as handle:
        profile = yte.process_yaml(handle, require_use_yte=True)
    return {rule for rule, resources in profile["set-resources"].items() if "slurm_partition" in resources}


def job_env() -> dict[str, str]:
    """This environment plus the CI partition/account; jobs inherit it (sbatch --export=ALL)."""
    env = dict(os.environ, **ci_settings(), OMP_NUM_THREADS="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return env


def snakemake_command(snakefile: Path, workdir: Path, *args: str) -> list[str]:
    """Snakemake with the user's SLURM profile; only status polling is made quicker for a test."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--profile",
        str(PROFILE),
        "--cores",
        CORES,
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--latency-wait",
        "5",
        *args,
    ]


def run_snakemake(snakefile: Path, workdir: Path, *args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        snakemake_command(snakefile, workdir, *args),
        cwd=ROOT,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sacct_jobs(log: str) -> pd.DataFrame:
    """Every SLURM job of the Snakemake run that wrote ``log`` (the plugin names each job after the run's
    ID), once accounting has recorded its end."""
    (run_id,) = re.findall(r"^SLURM run ID: (\S+)$", log, flags=re.M)
    for _ in range(60):
        out = subprocess.run(
            ["sacct", "-X", "-P", "-n", "-S", "now-1days", "--name", run_id, "-o", ",".join(SACCT_FIELDS)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = [line.split("|") for line in out.splitlines() if line]
        jobs = pd.DataFrame(rows, columns=list(SACCT_FIELDS))
        jobs["rule"] = jobs["Comment"].str.extract(r"^rule_(\w+?)(?:_wildcards_.*)?$", expand=False)
        if jobs["State"].str.split().str[0].isin(FINAL_STATES).all():
            return jobs
        time.sleep(0.5)
    raise AssertionError(f"sacct still shows unfinished jobs of run {run_id}:\n{jobs}")


@dataclass
class Submitted:
    rule: str  # for a group job "group <name>"
    threads: int
    resources: dict[str, str]
    slurm_id: str
    members: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)
    """A group job's jobs: (rule, threads, resources) each; empty for a job of its own."""


SHOWN_LOG = re.compile(r"^Logfile [^\n]*:\n={80}\n.*?^={80}$", flags=re.M | re.S)
"""A failed job's log as the profiles' show-failed-logs prints it: a SLURM job's holds the job's own
Snakemake log (its "rule ..." lines are that job's, not the run's)."""


def submissions(log: str) -> list[Submitted]:
    """Each sbatch submission in a Snakemake log, with the threads and resources Snakemake gave the job
    (of a group job: those of each of its jobs, which the log prints indented under "Group job ...");
    the failed jobs' logs it shows are left out."""
    log = SHOWN_LOG.sub("", log)
    declared: dict[str, tuple[str, int, dict[str, str]]] = {}
    groups: list[tuple[str, list]] = []  # group jobs printed and not yet submitted, in order
    out = []
    rule = jobid = group = None
    threads, resources = 1, {}
    for line in log.splitlines():
        if m := re.search(r"\] Group job (\S+) \(jobs in lexicogr\. order\):$", line):
            group = (m[1], [])
            groups.append(group)
        elif m := re.match(r"^( {4})?(local)?rule (\w+):$", line):
            rule, jobid, threads, resources = (None if m[2] else m[3]), None, 1, {}
            group = group if m[1] else None
        elif m := re.match(r"^\s+jobid: (\d+)$", line):
            jobid = m[1]
        elif m := re.match(r"^\s+threads: (\d+)$", line):
            threads = int(m[1])
        elif (m := re.match(r"^\s+resources: (.*)$", line)) and rule and jobid:
            resources = dict(item.split("=", 1) for item in m[1].split(", "))
            if group:
                group[1].append((rule, threads, resources))
            else:
                declared[jobid] = (rule, threads, resources)
        elif m := re.match(r"^Job (\S+) has been submitted with SLURM jobid (\d+)", line):
            if m[1].isdigit():
                out.append(Submitted(*declared[m[1]], slurm_id=m[2]))
            else:
                name, members = groups.pop(0)
                out.append(Submitted(f"group {name}", 0, {}, slurm_id=m[2], members=members))
    return out


def minutes(time_limit: str) -> int:
    """sacct's time limit ([D-]HH:MM:SS) in minutes."""
    days, _, clock = time_limit.rpartition("-")
    hours, mins, _ = map(int, clock.split(":"))
    return int(days or 0) * 24 * 60 + hours * 60 + mins


def slurm_time(minutes: int) -> str:
    """A runtime in minutes as sacct prints a time limit: [D-]HH:MM:SS."""
    days, rest = divmod(minutes, 24 * 60)
    text = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{text}" if days else text


def megabytes(req_mem: str) -> float:
    """sacct's ReqMem ("300M", "2G") in MB."""
    number, unit = re.fullmatch(r"([\d.]+)([KMGT])", req_mem).groups()
    return float(number) * 1024 ** "KMGT".index(unit) / 1024


def check_every_job_went_through_sbatch(log: str, workdir: Path) -> pd.DataFrame:
    """Every non-local job Snakemake ran was an sbatch job (of its own, or with its group) that requested
    what the rule declared (a group job: at least what its largest job declared, at most CORES wide), in
    the CI partition and account; returns the sacct rows."""
    submitted = submissions(log)
    executed = re.findall(r"^(?: {4})?rule (\w+):$", SHOWN_LOG.sub("", log), flags=re.M)
    ran = [rule for s in submitted for rule in ([m[0] for m in s.members] or [s.rule])]
    assert sorted(ran) == sorted(executed) and ran, "a non-local job did not go through sbatch"
    jobs = sacct_jobs(log).set_index("JobIDRaw")
    assert sorted(jobs.index) == sorted(s.slurm_id for s in submitted), "sacct and Snakemake disagree"
    ci = ci_settings()
    on_gpu = profile_gpu_rules()
    for s in submitted:
        job = jobs.loc[s.slurm_id]
        assert job["WorkDir"] == str(workdir)
        rules = {m[0] for m in s.members} or {s.rule}  # a group's jobs are all of one kind
        kind = "GPU" if rules <= on_gpu else "CPU"
        assert job["Partition"] == ci[f"ATTNGEOM_SLURM_{kind}_PARTITION"], (s, job["Partition"])
        assert job["Account"] == ci["ATTNGEOM_SLURM_ACCOUNT"]
        if s.members:
            assert job["Comment"].startswith(f"rule_{s.rule.removeprefix('group ')}_"), (job, s)
            assert megabytes(job["ReqMem"]) >= max(int(r["mem_mb"]) for _, _, r in s.members), s
            assert max(t for _, t, _ in s.members) <= int(job["ReqCPUS"]) <= int(CORES), s
            assert minutes(job["Timelimit"]) >= max(int(r["runtime"]) for _, _, r in s.members), s
            continue
        assert job["rule"] == s.rule
        nodes = int(s.resources.get("nodes", 1))  # a multi-node job's threads, memory and gres are per node
        assert megabytes(job["ReqMem"]) == int(s.resources["mem_mb"]) * nodes, s
        assert int(job["ReqCPUS"]) == s.threads * int(s.resources.get("tasks", 1)), s
        assert job["Timelimit"] == slurm_time(int(s.resources["runtime"])), s
        gpus = re.search(r"gres/gpu=(\d+)", job["ReqTRES"])
        per_node = re.fullmatch(r"gpu(?::\w+)?:(\d+)", s.resources.get("gres", "gpu:0"))
        expected = int(s.resources.get("gpu", 0)) or int(per_node[1]) * nodes
        assert (int(gpus[1]) if gpus else 0) == expected, s
    return jobs.reset_index()


@pytest.fixture(scope="module")
def behaviours(tmp_path_factory):
    """One run of the test workflow: a job with declared resources, a flaky job, a GPU job, and a job that
    always fails (so the run ends in failure, but must end)."""
    workdir = tmp_path_factory.mktemp("slurm_behaviours")
    started = time.monotonic()
    run = run_snakemake(TEST_WORKFLOW, workdir, "all", "never.txt", timeout=600)
    return workdir, run, time.monotonic() - started


def test_every_job_goes_through_sbatch_with_the_declared_resources(behaviours):
    workdir, run, _ = behaviours
    jobs = check_every_job_went_through_sbatch(run.stderr, workdir)
    done = jobs[jobs["rule"] == "resources"]
    assert list(done["State"]) == ["COMPLETED"]
    assert (done[["ReqMem", "ReqCPUS", "Timelimit"]].values == [["300M", "2", "00:03:00"]]).all()
    # the command ran inside that SLURM job, with the CPUs the rule asked for
    assert (workdir / "resources.txt").read_text().split() == [done["JobIDRaw"].iloc[0], "2"]


def test_a_rule_that_fails_once_is_retried_and_succeeds(behaviours):
    workdir, run, _ = behaviours
    jobs = sacct_jobs(run.stderr)
    flaky = jobs[jobs["rule"] == "flaky"].sort_values("JobIDRaw", key=lambda s: s.astype(int))
    assert list(flaky["State"]) == ["FAILED", "COMPLETED"]
    assert (workdir / "flaky.txt").read_text().strip() == flaky["JobIDRaw"].iloc[-1]


def test_a_rule_that_always_fails_is_reported_and_ends_the_run(behaviours):
    workdir, run, seconds = behaviours
    retries = yaml.safe_load((PROFILE / "config.yaml").read_text())["retries"]
    jobs = sacct_jobs(run.stderr)
    failed = jobs[jobs["rule"] == "always_fails"]
    assert list(failed["State"]) == ["FAILED"] * (retries + 1)
    assert run.returncode != 0
    assert "Error in rule always_fails" in run.stderr
    assert not (workdir / "never.txt").exists()
    # keep-going: the other jobs still finished
    assert all((workdir / f).exists() for f in ("resources.txt", "flaky.txt", "gpu.txt"))
    assert seconds < 300, f"the failing run took {seconds:.0f}s to end"


def test_a_gpu_job_sees_its_gpu(behaviours):
    workdir, run, _ = behaviours
    jobs = sacct_jobs(run.stderr)
    gpu = jobs[jobs["rule"] == "gpu"]
    assert list(gpu["State"]) == ["COMPLETED"]
    assert "gres/gpu=1" in gpu["ReqTRES"].iloc[0]
    assert (workdir / "gpu.txt").read_text().strip() == "CUDA_VISIBLE_DEVICES=0"


def read_results(results: Path) -> dict[str, pd.DataFrame]:
    """Every table the pipeline wrote (Parquet and CSV), by path relative to ``results``."""
    readers = {".parquet": pd.read_parquet, ".csv": pd.read_csv}
    return {
        str(path.relative_to(results)): readers[path.suffix](path)
        for path in sorted(results.rglob("*"))
        if path.suffix in readers
    }


def test_the_tiny_pipeline_runs_through_sbatch_and_matches_the_local_run(tmp_path):
    from pipeline_support import TINY_MODELS, write_config  # the pipeline tests' tiny config

    # both runs at once: the SLURM run spends much of its time waiting on the scheduler
    procs = {}
    for where in ("local", "slurm"):
        workdir = tmp_path / where
        workdir.mkdir()
        config = write_config(workdir / "tiny.yaml", TINY_MODELS)
        if where == "local":
            command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
            command += ["--directory", str(workdir), "--cores", "2"]
        else:
            command = snakemake_command(ROOT / "workflow" / "Snakefile", workdir)
        procs[where] = subprocess.Popen(
            [*command, "all", "--configfile", str(config)],
            cwd=ROOT,
            env=dict(job_env(), HF_HUB_OFFLINE="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    logs = {}
    try:
        for where, proc in procs.items():
            logs[where] = proc.communicate(timeout=900)[1]
            assert proc.returncode == 0, f"{where} run failed:\n{logs[where][-4000:]}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()

    jobs = check_every_job_went_through_sbatch(logs["slurm"], tmp_path / "slurm")
    assert (jobs["State"] == "COMPLETED").all(), jobs
    groups = {s.rule: {m[0] for m in s.members} for s in submissions(logs["slurm"])}
    # grouped by the profile: the per-model jobs in one sbatch job, the aggregates in another
    assert groups == {
        "group score": {"random_model", "score", "figure_heads"},
        "group summary": {"aggregate", "tables", "reference_comparison", "heatmap_matrix"}
        | {"figure_2", "figure_s1", "figure_s2"},
    }
    local, slurm = (read_results(tmp_path / where / "results") for where in ("local", "slurm"))
    assert sorted(slurm) == sorted(local) and len(local) > 5
    for name, frame in local.items():
        pd.testing.assert_frame_equal(slurm[name], frame, obj=name)
    figures = {
        p.relative_to(tmp_path / "local") for p in (tmp_path / "local" / "results").rglob("*.p[dn][fg]")
    }
    assert figures and all((tmp_path / "slurm" / f).stat().st_size > 0 for f in figures)


TRAIN_SETTINGS = {
    **dict(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seq_len=32, batch_size=4),
    **dict(grad_accum=1, steps=400, warmup_steps=10, lr=1e-3, log_every=1, checkpoint_every=20),
    **dict(score_every=200, vocab_size=500, max_documents=20, device="cpu"),
}
TRAIN_RESOURCES = {"gpus": 1, "threads": 1, "mem_mb": 2000, "runtime": 10}


@pytest.fixture(scope="module")
def training_reference(tmp_path_factory) -> tuple[dict, pd.DataFrame]:
    """The tiny training run's settings and the loss log of an uninterrupted run of it, outside SLURM."""
    pytest.importorskip("attngeom.training.cli")
    base = tmp_path_factory.mktemp("training")
    settings = {**TRAIN_SETTINGS, "cache_dir": str(base / "cache")}
    subprocess.run(
        ["attngeom", "train", "--quiet", "--out", str(base / "reference")]
        + [f"{key}={value}" for key, value in settings.items()],
        env=job_env(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return settings, pd.read_parquet(base / "reference" / "loss.parquet")


def wait_for(condition, seconds: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"snakemake ended before {what}:\n{proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {what} after {seconds}s")
        time.sleep(0.1)


@pytest.mark.parametrize("interrupt", ["scancel", "scontrol requeue"])
def test_an_interrupted_training_job_resumes_from_its_checkpoint(training_reference, tmp_path, interrupt):
    """The pipeline's train rule on SLURM, interrupted after its first checkpoint: cancelled (Snakemake
    submits it again) or requeued (SLURM restarts it). Either way it resumes and logs the same losses."""
    from pipeline_support import TINY_MODELS, write_config

    settings, expected = training_reference
    config = write_config(tmp_path / "tiny.yaml", TINY_MODELS)
    data = yaml.safe_load(config.read_text())
    data["training"] = {"defaults": settings, "runs": [{"name": "run", **TRAIN_RESOURCES}]}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / "results" / "training" / "run"
    proc = subprocess.Popen(
        snakemake_command(
            ROOT / "workflow" / "Snakefile",
            tmp_path,
            "results/training/run/final",
            "--configfile",
            str(config),
        ),
        cwd=ROOT,
        env=job_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for((run_dir / "checkpoint" / "state.pt").exists, 240, "training checkpoint", proc)
        # the job keeps replacing loss.parquet: read one whole version (pyarrow opens a path twice)
        before = pd.read_parquet(io.BytesIO((run_dir / "loss.parquet").read_bytes()))
        queue = subprocess.run(
            ["squeue", "-h", "-o", "%i|%k|%Z|%T"], capture_output=True, text=True, check=True
        ).stdout
        running = [
            line.split("|")[0]
            for line in queue.splitlines()
            if line.split("|")[1:] == ["rule_train_wildcards_run", str(tmp_path), "RUNNING"]
        ]
        assert len(running) == 1, queue
        subprocess.run([*interrupt.split(), running[0]], check=True)
        # SLURM holds a requeued job for 120 s; release it sooner (not within the second of the requeue,
        # whose revoked job credential would make the restart fail)
        if interrupt == "scontrol requeue":

            def pending() -> bool:
                state = ["squeue", "-h", "-j", running[0], "-o", "%T"]
                return subprocess.run(state, capture_output=True, text=True).stdout.strip() == "PENDING"

            wait_for(pending, 60, "requeued job pending", proc)
            subprocess.run(["scontrol", "update", f"JobId={running[0]}", "StartTime=now+3"], check=True)
        _, log = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log[-3000:]

    jobs = check_every_job_went_through_sbatch(log, tmp_path)  # including the GPU the run asks for
    train = jobs[jobs["rule"] == "train"].sort_values("JobIDRaw", key=lambda s: s.astype(int))
    assert train["JobIDRaw"].iloc[0] == running[0]
    if interrupt == "scancel":
        assert [state.split()[0] for state in train["State"]] == ["CANCELLED", "COMPLETED"]
    else:
        history = subprocess.run(
            ["sacct", "-X", "-D", "-P", "-n", "-j", running[0], "-o", "State"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert history == ["REQUEUED", "COMPLETED"]

    after = pd.read_parquet(run_dir / "loss.parquet")
    pd.testing.assert_frame_equal(after.drop(columns="elapsed_s"), expected.drop(columns="elapsed_s"))
    # resumed, not restarted: the steps up to the first checkpoint are the interrupted job's own rows,
    # timings included (a restart would have re-measured them)
    first = settings["checkpoint_every"]
    pd.testing.assert_frame_equal(after[after["step"] <= first], before[before["step"] <= first])


def test_a_training_run_on_two_nodes_is_one_ddp_run_across_them(tmp_path):
    """A run with ``nodes: 2`` through the profile: one sbatch job of two nodes, in which srun starts one
    torchrun per node; they meet at the first node and train as two DDP ranks (gloo, on the CPU), so the
    loss log is that of one process accumulating the same two micro-batches per step."""
    from pipeline_support import TINY_MODELS, write_config

    settings = {**TRAIN_SETTINGS, "steps": 8, "checkpoint_every": 4, "score_every": 8, "dropout": 0.0}
    settings["cache_dir"] = str(tmp_path / "cache")
    reference = tmp_path / "one-process"
    subprocess.run(
        ["attngeom", "train", "--quiet", "--out", str(reference)]
        + [f"{key}={value}" for key, value in {**settings, "grad_accum": 2}.items()],
        env=job_env(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    config = write_config(tmp_path / "tiny.yaml", TINY_MODELS)
    data = yaml.safe_load(config.read_text())
    two_nodes = {"nodes": 2, "gpus": 1, "threads": 1, "mem_mb": 1000, "runtime": 10}
    data["training"] = {"defaults": settings, "runs": [{"name": "ddp", **two_nodes}]}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    run = run_snakemake(
        ROOT / "workflow" / "Snakefile",
        tmp_path,
        "results/training/ddp/final",
        "--configfile",
        str(config),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]

    jobs = check_every_job_went_through_sbatch(run.stderr, tmp_path)  # 2 nodes, 1 CPU and 1 GPU each
    (job,) = jobs.loc[jobs["rule"] == "train", "JobIDRaw"]
    steps = subprocess.run(
        ["sacct", "-P", "-n", "-j", job, "-o", "JobID,NNodes,NTasks,NodeList,State"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (launch,) = [
        line.split("|") for line in steps.splitlines() if re.fullmatch(rf"{job}\.\d+", line.split("|")[0])
    ]
    nodes = subprocess.run(
        ["scontrol", "show", "hostnames", launch[3]], capture_output=True, text=True, check=True
    ).stdout.split()
    assert launch[1:3] == ["2", "2"] and len(set(nodes)) == 2 and launch[4] == "COMPLETED", steps
    log = (tmp_path / "results" / "training" / "logs" / "train" / "ddp.log").read_text()
    launchers = re.findall(
        r"^node (\S+), task (\d) of 2: .*--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d", log, re.M
    )
    assert sorted(launchers) == sorted(zip(nodes, ["0", "1"], strict=True)), log[-3000:]

    two = pd.read_parquet(tmp_path / "results" / "training" / "ddp" / "loss.parquet")
    one = pd.read_parquet(reference / "loss.parquet")
    assert list(two["step"]) == list(range(1, settings["steps"] + 1))
    pd.testing.assert_frame_equal(
        two.drop(columns="elapsed_s"), one.drop(columns="elapsed_s"), rtol=1e-5, atol=1e-6
    )


def test_two_runs_that_share_a_gpu_train_side_by_side_in_one_sbatch_job_with_one_gpu(tmp_path):
    """``runs_per_gpu: 2``: the two train jobs are one sbatch job (group gpu_share_2) that asks for one GPU
    and both jobs' CPUs and memory, and Snakemake runs both in it at once."""
    from pipeline_support import TINY_MODELS, write_config

    settings = {**TRAIN_SETTINGS, "steps": 20, "checkpoint_every": 10, "score_every": 20}
    settings["cache_dir"] = str(tmp_path / "cache")
    config = write_config(tmp_path / "tiny.yaml", TINY_MODELS)
    data = yaml.safe_load(config.read_text())
    shared = {**TRAIN_RESOURCES, "mem_mb": 1000, "runs_per_gpu": 2}
    data["training"] = {"defaults": {**settings, **shared}, "runs": [{"name": "a"}, {"name": "b", "seed": 1}]}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    targets = [f"results/training/{run}/final" for run in ("a", "b")]
    args = ("--configfile", str(config), "--slurm-keep-successful-logs")
    run = run_snakemake(ROOT / "workflow" / "Snakefile", tmp_path, *targets, *args, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]

    jobs = check_every_job_went_through_sbatch(run.stderr, tmp_path)
    (group,) = submissions(run.stderr)
    assert group.rule == "group gpu_share_2" and [m[0] for m in group.members] == ["train", "train"]
    (job,) = [row for _, row in jobs.iterrows()]
    assert re.search(r"gres/gpu=1\b", job["ReqTRES"]), job["ReqTRES"]  # one GPU for both
    assert int(job["ReqCPUS"]) == 2 and megabytes(job["ReqMem"]) >= 2000  # both jobs' CPUs and memory
    assert minutes(job["Timelimit"]) == 2 * TRAIN_RESOURCES["runtime"]  # a shared run's: twice its own
    (log,) = (tmp_path / ".snakemake" / "slurm_logs").rglob(f"{group.slurm_id}.log")
    text = log.read_text()
    first_done = text.index("Finished jobid")
    assert text[:first_done].count("rule train:") == 2, "the two runs did not start side by side"
    for name in ("a", "b"):
        losses = pd.read_parquet(tmp_path / "results" / "training" / name / "loss.parquet")
        assert losses["step"].max() == settings["steps"]
        train_log = (tmp_path / "results" / "training" / "logs" / "train" / f"{name}.log").read_text()
        assert re.search(r"^CUDA_VISIBLE_DEVICES=0$", train_log, re.M), train_log[:2000]  # the job's GPU
