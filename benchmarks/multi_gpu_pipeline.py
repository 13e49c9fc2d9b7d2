"""One job per GPU through the local pipeline, on a machine with several GPUs.

Runs the four training runs of the embedded default at GPU size (``multi_gpu_pipeline.yaml``: BERT-mini,
600 steps of 32 × 512 tokens, one GPU each) and the GPU scoring of their final models through
``snakemake --profile profiles/local``, as a user does, while ``nvidia-smi`` samples every GPU. Then it
writes into OUT which job ran on which GPU and when, from the jobs' own records (each job logs the GPUs
it held and when, ``attngeom.pipeline.gpus``) and from nvidia-smi (the GPU each job's process was seen
on), and checks: never two jobs on one GPU, every GPU used, all of them busy at once.

    python benchmarks/multi_gpu_pipeline.py OUT [--workdir DIR] [--configfile CONFIG]

OUT gets ``placement.md`` (the summary, also printed), ``jobs.csv``, ``nvidia-smi.csv`` (utilisation and
memory of every GPU, every 0.5 s), ``nvidia-smi-apps.csv`` (the processes on each GPU, as often), ``snakemake.log``
and ``logs/`` (every job's log). The run itself (models, checkpoints) goes to DIR, by default a fresh
temporary folder. Exit code 1 if the pipeline failed or a check did not hold.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import io
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from itertools import combinations
from pathlib import Path

import yaml

from attngeom.files import write_text
from attngeom.pipeline.gpus import read_records
from attngeom.pipeline.registry import slug

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "multi_gpu_pipeline.yaml"
SAMPLE_MS = "500"


def nvidia_smi(*args: str) -> list[list[str]]:
    """Rows of an nvidia-smi CSV query."""
    out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True).stdout
    return [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(out)) if row]


def start_sampler(query: str, fields: str, path: Path) -> subprocess.Popen:
    """nvidia-smi writing ``fields`` of ``query`` to ``path`` every SAMPLE_MS until stopped."""
    path.write_text(fields + "\n")
    with path.open("a") as stream:
        command = ["nvidia-smi", f"{query}={fields}", "--format=csv,noheader,nounits", "-lms", SAMPLE_MS]
        return subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT)


def job_rows(workdir: Path, runs: list[str], begin: datetime.datetime) -> list[dict]:
    """Each job's GPU hold from its own log, times in seconds since ``begin``."""
    logs = {
        f"train {run}": workdir / "results" / "training" / "logs" / "train" / f"{run}.log" for run in runs
    }
    for run in runs:
        logs[f"score {run}"] = workdir / "results" / "logs" / "score" / f"{slug('trained/' + run)}.log"
    rows = []
    for job, log in logs.items():
        holds = read_records(log.read_text()) if log.exists() else []
        for hold in holds:
            end = hold["end"]
            rows.append(
                {
                    "job": job,
                    "gpus": ",".join(hold["gpus"]),
                    "start_s": round((hold["start"] - begin).total_seconds(), 1),
                    "end_s": round((end - begin).total_seconds(), 1) if end else None,
                    "pid": hold["pid"],
                }
            )
        if not holds:
            rows.append({"job": job, "gpus": "", "start_s": None, "end_s": None, "pid": None})
    return rows


def seen_on(apps_csv: Path, uuid_to_index: dict[str, str]) -> dict[int, set[str]]:
    """pid → the GPUs (indices) nvidia-smi listed it on."""
    seen: dict[int, set[str]] = {}
    rows = list(csv.reader(apps_csv.open()))[1:]
    for row in rows:
        if len(row) >= 2 and row[1].strip().isdigit():
            seen.setdefault(int(row[1]), set()).add(uuid_to_index.get(row[0].strip(), row[0].strip()))
    return seen


def utilisation(samples_csv: Path) -> list[str]:
    """Per GPU, from the nvidia-smi samples: mean utilisation and peak memory over the run."""
    per_gpu: dict[str, list[tuple[float, float]]] = {}
    for row in list(csv.reader(samples_csv.open()))[1:]:
        try:
            per_gpu.setdefault(row[1].strip(), []).append((float(row[2]), float(row[3])))
        except (IndexError, ValueError):  # a line cut short when the sampler was stopped
            continue
    return [
        f"GPU {gpu}: mean utilisation {sum(u for u, _ in v) / len(v):.0f}% over {len(v)} samples, "
        f"peak memory {max(m for _, m in v):.0f} MiB"
        for gpu, v in sorted(per_gpu.items())
    ]


def checks(rows: list[dict], gpus: list[str]) -> list[tuple[str, bool]]:
    done = [r for r in rows if r["start_s"] is not None and r["end_s"] is not None]
    spans = [(r, set(r["gpus"].split(",")) - {""}) for r in done]
    shared = [
        (a["job"], b["job"])
        for (a, ga), (b, gb) in combinations(spans, 2)
        if a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"] and ga & gb
    ]
    peak = max(
        (sum(len(g) for o, g in spans if o["start_s"] <= r["start_s"] < o["end_s"]) for r, _ in spans),
        default=0,
    )
    return [
        (f"every job recorded its GPU and gave it back ({len(done)} of {len(rows)})", len(done) == len(rows)),
        ("every job held one GPU", all(len(g) == 1 for _, g in spans)),
        ("no two jobs held one GPU at once" + (f" (shared: {shared})" if shared else ""), not shared),
        (f"every GPU was used ({','.join(gpus)})", set().union(*(g for _, g in spans)) == set(gpus)),
        (f"all GPUs busy at once, never more (peak {peak} of {len(gpus)})", peak == len(gpus)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--workdir", type=Path, help="where the pipeline runs (default: a new temporary folder)"
    )
    parser.add_argument(
        "--configfile", type=Path, default=CONFIG, help="a pipeline config with training runs"
    )
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="attngeom-multi-gpu-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config = args.configfile.resolve()
    runs = [run["name"] for run in yaml.safe_load(config.read_text())["training"]["runs"]]
    targets = [f"results/training/{run}/final" for run in runs]
    targets += [f"results/scores/{slug('trained/' + run)}.parquet" for run in runs]

    inventory = nvidia_smi("--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader")
    gpus = [row[0] for row in inventory]
    samplers = [
        start_sampler("--query-gpu", "timestamp,index,utilization.gpu,memory.used", out / "nvidia-smi.csv"),
        start_sampler("--query-compute-apps", "gpu_uuid,pid,used_memory", out / "nvidia-smi-apps.csv"),
    ]
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
    command += ["--directory", str(workdir), "--profile", str(ROOT / "profiles" / "local")]
    command += [*targets, "--configfile", str(config)]
    begin = datetime.datetime.now(datetime.UTC)
    with (out / "snakemake.log").open("w") as log:
        code = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = (datetime.datetime.now(datetime.UTC) - begin).total_seconds()
    for sampler in samplers:
        sampler.terminate()
        sampler.wait()
    for log in [
        *(workdir / "results" / "training" / "logs").rglob("*.log"),
        *(workdir / "results" / "logs").rglob("*.log"),
    ]:
        shutil.copy(log, out / "logs" / f"{log.parent.name}-{log.name}")

    rows = job_rows(workdir, runs, begin)
    seen = seen_on(out / "nvidia-smi-apps.csv", {row[1]: row[0] for row in inventory})
    for row in rows:
        row["nvidia_smi_saw_pid_on"] = ",".join(sorted(seen.get(row["pid"], set()))) or "not seen"
    results = [(f"snakemake exit code {code}", code == 0), *checks(rows, gpus)]
    seen_rows = [row for row in rows if row["nvidia_smi_saw_pid_on"] != "not seen"]
    if seen_rows:  # nvidia-smi may not list processes (a container's own pid namespace)
        same = all(row["nvidia_smi_saw_pid_on"] == row["gpus"] for row in seen_rows)
        results.append(
            (f"nvidia-smi saw each job's process on its own GPU ({len(seen_rows)} jobs seen)", same)
        )
    fields = list(rows[0])
    table = ["| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
    table += [
        "| " + " | ".join(str(row[f]) for f in fields) + " |"
        for row in sorted(rows, key=lambda r: r["start_s"] or 0)
    ]
    text = "\n".join(
        [
            "# One job per GPU through `snakemake --profile profiles/local`",
            "",
            f"{begin:%Y-%m-%d %H:%M} UTC, {platform.node()}, torch {importlib.metadata.version('torch')}, {seconds:.0f} s in all.",
            "GPUs: " + "; ".join(f"{row[0]}: {row[2]} ({row[1]}, driver {row[3]})" for row in inventory),
            f"Config: {config.relative_to(ROOT) if config.is_relative_to(ROOT) else config.name}; "
            f"CUDA_VISIBLE_DEVICES of Snakemake: {os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}.",
            "",
            "Jobs (seconds since Snakemake started; `gpus` from the job's own record, the last column from nvidia-smi):",
            "",
            *table,
            "",
            "nvidia-smi, every 0.5 s while the pipeline ran:",
            "",
            *(f"- {line}" for line in utilisation(out / "nvidia-smi.csv")),
            "",
            *(f"- {'PASS' if ok else 'FAIL'}: {what}" for what, ok in results),
            "",
        ]
    )
    write_text(out / "placement.md", text)
    write_text(
        out / "jobs.csv",
        "\n".join([",".join(fields), *(",".join(f'"{row[f]}"' for f in fields) for row in rows)]) + "\n",
    )
    print(text)
    return 0 if all(ok for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
