"""A zoo query over 1,000 emulated Hub repositories, end to end: resolve, DAG, local run, SLURM run.

``tests/zoo_repos.make_zoo`` writes tiny repositories of mixed families and formats (hard links to a few
dozen templates); the tests' hub-like server lists and serves them on 127.0.0.1. Then, in a scratch
folder: ``attngeom zoo resolve`` of ``zoo: {name: bench, limit: N}``, ``snakemake -n`` (the DAG build),
``snakemake --profile profiles/local all`` and, with ``--slurm`` (the CI cluster of .ci/slurm/up.sh must
be up), the same through ``--profile profiles/slurm``, each run from empty caches. Reported: wall times,
scheduler jobs submitted, bytes the server sent against the bytes of the q/k tensors of the repositories
scored, the share scored / unsupported / failed and the failure reasons; and the cost of a process per
model (``batch_size: 1`` on the first ``--per-model`` repositories) against batches. ``--plan-only``: only
``zoo resolve`` and the DAG build, for a Hub-scale zoo (100,000 repositories). Each step's wall time comes
with the CPU time of its process (user + system), which the other jobs of a shared box disturb far less.

    python benchmarks/bench_zoo.py                        # 1,000 repositories, local profile
    python benchmarks/bench_zoo.py --slurm --json benchmarks/results/zoo.json
    python benchmarks/bench_zoo.py -n 100000 --plan-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "tests")]

import gguf  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from hubserver import HubServer  # noqa: E402
from zoo_repos import make_zoo  # noqa: E402

from attngeom.architectures import architecture_for  # noqa: E402
from attngeom.errors import reason_kind  # noqa: E402
from attngeom.report.summary import statuses_in  # noqa: E402
from attngeom.sources import open_source  # noqa: E402

METADATA = ("config.json", "model.safetensors.index.json")


def qk_bytes(folder: Path) -> int:
    """Bytes of the q/k tensors as stored in a repository's files: what a ranged read must fetch."""
    files = sorted(folder.iterdir())
    gguf_files = [f for f in files if f.suffix == ".gguf"]
    if gguf_files:  # llama's q and k in GGUF's names (the source reports them in transformers' names)
        tensors = gguf.GGUFReader(gguf_files[0]).tensors
        return sum(int(t.n_bytes) for t in tensors if ".attn_q." in t.name or ".attn_k." in t.name)
    source = open_source(folder)
    list(architecture_for(source.config).layers(source.config, source))
    names = set(source.loaded)
    total = 0
    for path in files:
        if path.suffix == ".safetensors":
            with open(path, "rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
            total += sum(e["data_offsets"][1] - e["data_offsets"][0] for n, e in header.items() if n in names)
        elif path.suffix == ".bin":
            state = torch.load(path, weights_only=True)
            total += sum(state[n].numel() * state[n].element_size() for n in names)
    return total


def timed(command: list[str], cwd: Path, env: dict, log: Path) -> float:
    return timed_cpu(command, cwd, env, log)[0]


def timed_cpu(command: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, float]:
    """Wall seconds of ``command`` and the CPU seconds (user + system) of it and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.call(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise SystemExit(f"{' '.join(command)} failed (exit {code}); the end of its log:\n{tail}")
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def snakemake(*args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile"), *args]


def outcome_of(status: dict) -> str:
    if status["status"] == "ok":
        return "scored"
    if "unsupported model_type" in status.get("reason", ""):
        return "unsupported"
    return status["status"]  # failed, crashed


def run(work: Path, zoo, server: HubServer, profile: list[str], env: dict, name: str) -> dict:
    """One pipeline run from empty caches; what it cost and what it recorded."""
    server.repo_bytes.clear()
    server.requests.clear()
    home = work / f".{name}"
    env = {**env, "HF_HOME": str(home / "hf"), "ATTNGEOM_CACHE": str(home / "cache")}
    log = work / f"{name}.log"
    wall = timed(snakemake(*profile, "all", "--configfile", "zoo.yaml"), work, env, log)
    text = log.read_text()
    statuses = [
        status
        for p in sorted((work / "results" / "scores").rglob("*.status.json"))
        for status in statuses_in(p)
    ]
    outcomes = Counter(outcome_of(s) for s in statuses)
    reasons = Counter(reason_kind(s["reason"]) for s in statuses if s["status"] != "ok")
    scored = [s["model"] for s in statuses if s["status"] == "ok"]
    sent = {repo: server.repo_bytes[repo] for repo in zoo.repos}
    metadata = {
        repo: sum((zoo.repos[repo] / f).stat().st_size for f in METADATA if (zoo.repos[repo] / f).exists())
        for repo in zoo.repos
    }
    by_range = [r for r in scored if zoo.outcomes[r].name != "gpt2-bin"]
    qk = {repo: QK[zoo.templates[repo]] for repo in scored}
    result = {
        "wall_s": round(wall, 1),
        "snakemake_jobs": len(re.findall(r"^(?: {4})?(?:local)?rule \w+:$", text, flags=re.M)),
        "sbatch_jobs": len(re.findall(r"has been submitted with SLURM jobid", text)),
        "models": len(statuses),
        "outcomes": dict(outcomes),
        "reasons": dict(reasons.most_common()),
        "bytes_sent": sum(sent.values()),
        "qk_bytes_scored": sum(qk.values()),
        "ranged": {
            "repos": len(by_range),
            "weight_bytes_sent": sum(sent[r] - metadata[r] for r in by_range),
            "qk_bytes": sum(qk[r] for r in by_range),
            "metadata_bytes": sum(metadata[r] for r in by_range),
        },
        "bin_whole_file_bytes": sum(sent[r] for r in scored if r not in by_range),
        "by_kind": {
            kind: {
                "repos": len(repos),
                "weight_bytes_sent": sum(sent[r] - metadata[r] for r in repos),
                "qk_bytes": sum(qk[r] for r in repos),
            }
            for kind in sorted({zoo.outcomes[r].name for r in scored})
            for repos in [[r for r in scored if zoo.outcomes[r].name == kind]]
        },
        "seconds_in_children": round(sum(s.get("seconds", 0) for s in statuses), 1),
        "requests": len(server.requests),
    }
    subprocess.run(["rm", "-rf", str(work / "results"), str(work / ".snakemake"), str(home)], check=True)
    return result


QK: dict[Path, int] = {}
"""q/k bytes of each template that can be scored."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="repositories (default %(default)s)")
    parser.add_argument("--per-model", type=int, default=40, help="repositories scored a process each")
    parser.add_argument("--slurm", action="store_true", help="also through profiles/slurm (CI cluster)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--plan-only", action="store_true", help="only zoo resolve and the DAG build")
    args = parser.parse_args()
    figures: dict = {"cpus": os.cpu_count(), "load_average": round(os.getloadavg()[0], 1), "n": args.n}
    with tempfile.TemporaryDirectory(prefix="bench_zoo.") as scratch:
        root = Path(scratch)
        start = time.monotonic()
        zoo = make_zoo(root / "hub", args.n)
        figures["make_zoo_s"] = round(time.monotonic() - start, 1)
        figures["disk_mb"] = round(
            int(
                subprocess.run(
                    ["du", "-sb", str(root / "hub")], capture_output=True, text=True
                ).stdout.split()[0]
            )
            / 1e6,
            1,
        )
        for repo, template in zoo.templates.items():
            if not args.plan_only and zoo.outcomes[repo].outcome == "ok" and template not in QK:
                QK[template] = qk_bytes(template)
        server = zoo.server()
        for folder in zoo.repos.values():
            for file in folder.iterdir() if not args.plan_only else ():
                server.etag(file)  # hashed now, not while timed
        work = root / "work"
        work.mkdir()
        with server.running():
            env = {**os.environ, "HF_ENDPOINT": server.url, "HF_HUB_DISABLE_XET": "1", "OMP_NUM_THREADS": "1"}
            env["HF_HOME"] = str(root / "resolve-hf")
            (work / "zoo.yaml").write_text(yaml.safe_dump({"zoo": {"name": "bench", "limit": args.n}}))
            resolve = [sys.executable, "-m", "attngeom.cli", "zoo", "resolve", "zoo.yaml"]
            wall, cpu = timed_cpu(resolve, work, env, work / "resolve.log")
            figures["resolve_s"], figures["resolve_cpu_s"] = round(wall, 1), round(cpu, 1)
            figures["resolve_requests"] = len(server.requests)
            dry = snakemake("-n", "all", "--configfile", "zoo.yaml")
            wall, cpu = timed_cpu(dry, work, env, work / "dag.log")
            figures["dag_s"], figures["dag_cpu_s"] = round(wall, 1), round(cpu, 1)
            figures["dag_jobs"] = len(
                re.findall(r"^(?:local)?rule \w+:$", (work / "dag.log").read_text(), re.M)
            )
            figures["load_average_after"] = round(os.getloadavg()[0], 1)
            if args.plan_only:
                report(figures)
                if args.json:
                    args.json.write_text(json.dumps(figures, indent=1) + "\n")
                return 0
            figures["local"] = run(
                work, zoo, server, ["--profile", str(ROOT / "profiles" / "local")], env, "local"
            )
            if args.slurm:
                ci = dict(
                    line.split("=", 1)
                    for line in (ROOT / ".ci" / "slurm" / "ci.env").read_text().splitlines()
                    if line and not line.startswith("#")
                )
                slurm = ["--profile", str(ROOT / "profiles" / "slurm"), "--cores", str(os.cpu_count())]
                slurm += ["--slurm-init-seconds-before-status-checks", "2", "--latency-wait", "5"]
                figures["slurm"] = run(work, zoo, server, slurm, {**env, **ci}, "slurm")
            # a process per model against one batch, on the first repositories: batch_size 1 vs all of them
            for label, size in (("per_model", 1), ("one_batch", args.per_model)):
                few = {"name": "few", "limit": args.per_model, "batch_size": size}
                (work / "zoo.yaml").write_text(yaml.safe_dump({"zoo": few}))
                if size == 1:
                    timed(resolve, work, env, work / "resolve-few.log")
                home = work / f".{label}"
                env_run = {**env, "HF_HOME": str(home / "hf"), "ATTNGEOM_CACHE": str(home / "cache")}
                command = snakemake(  # every scoring batch, nothing after them
                    "--profile", str(ROOT / "profiles" / "local"), "all", "--until", "score_zoo",
                    "--configfile", "zoo.yaml",
                )  # fmt: skip
                wall = timed(command, work, env_run, work / f"{label}.log")
                figures[label] = {
                    "models": args.per_model,
                    "wall_s": round(wall, 1),
                    "s_per_model": round(wall / args.per_model, 2),
                }
                subprocess.run(
                    ["rm", "-rf", str(work / "results"), str(work / ".snakemake"), str(home)], check=True
                )
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


def report(figures: dict) -> None:
    print(
        f"{figures['n']} repositories on {figures['cpus']} CPUs (load average {figures['load_average']}); "
        f"written in {figures['make_zoo_s']} s, {figures['disk_mb']} MB on disk"
    )
    print(
        f"zoo resolve: {figures['resolve_s']} s, {figures['resolve_cpu_s']} CPU s "
        f"({figures['resolve_requests']} listing requests); DAG build (snakemake -n): {figures['dag_s']} s, "
        f"{figures['dag_cpu_s']} CPU s ({figures['dag_jobs']} jobs); load average {figures['load_average']} "
        f"before, {figures['load_average_after']} after"
    )
    if "local" not in figures:
        return
    for name in ("local", "slurm"):
        if name not in figures:
            continue
        r = figures[name]
        ranged = r["ranged"]
        print(
            f"\n{name}: {r['wall_s']} s wall, {r['snakemake_jobs']} Snakemake jobs, {r['sbatch_jobs']} sbatch jobs, "
            f"{r['models']} models: {r['outcomes']}"
        )
        print(
            f"  bytes sent {r['bytes_sent']:,}; ranged repositories ({ranged['repos']}): weight bytes "
            f"{ranged['weight_bytes_sent']:,} / q/k bytes {ranged['qk_bytes']:,} = "
            f"{ranged['weight_bytes_sent'] / max(ranged['qk_bytes'], 1):.3f} (+ {ranged['metadata_bytes']:,} "
            f"of config/index); .bin whole files {r['bin_whole_file_bytes']:,}"
        )
        for kind, k in r["by_kind"].items():
            print(
                f"    {kind:<14} {k['repos']:4d} repos: weight bytes / q/k bytes = "
                f"{k['weight_bytes_sent'] / max(k['qk_bytes'], 1):.3f}"
            )
        print(f"  seconds inside the forked children, summed: {r['seconds_in_children']}")
        for reason, n in r["reasons"].items():
            print(f"    {n:4d}  {reason}")
    for label in ("per_model", "one_batch"):
        r = figures[label]
        print(f"{label}: {r['models']} models in {r['wall_s']} s = {r['s_per_model']} s per model")
    print(f"batches of 50 would take ~{math.ceil(figures['n'] / 50)} jobs")


if __name__ == "__main__":
    sys.exit(main())
