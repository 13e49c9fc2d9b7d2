"""Table 1's init arms as the authors' code trains them, on the offline corpus, on a host of several GPUs.

Encoders on the State of the Union paragraphs (``bench_training.py prepare``), with ``config/paper.yaml``'s
training defaults as they are (``recipe: authors_code``: per-token masking, the Trainer's mean of 8 groups,
BERT's uncased vocabulary; 256 documents an update; the 200,000-update schedule, stopped at
``--stop-at``), in three experiments (``--experiments``, all by default):

- ``wordpiece``: the four init arms (``random``, ``symmetric`` at BERT's init, ``torch_default``,
  ``torch_default_symmetric``, the authors' own) × 5 seeds, to 15,000 updates;
- ``characters``: the same paragraphs spaced out character by character (``recipe:
  authors_code_characters``, as the authors' code read Wikipedia and RedPajama), ``random`` and
  ``torch_default_symmetric`` × 3 seeds, to 10,000 updates;
- ``layers12``: 12-layer encoders (BERT-base sizes), word pieces, ``random`` and ``torch_default_symmetric``
  × 3 seeds, to 4,000 updates (where the authors' 12-layer Jigsaw runs are 0.54 nats apart);
- ``horizon``: the word-piece encoders of ``wordpiece`` at the paper's horizon: ``random`` and
  ``torch_default_symmetric`` × 2 seeds, to 150,000 updates (one run a GPU: ~20 minutes each on an H200);
- ``wordpiece_more``: seeds 5–7 of ``wordpiece``'s four arms, so that with the committed 0–4 the exact tests
  over 8 seed pairs can reach p < 0.05;
- ``decoders``: 4-layer decoders on the same text, ``random`` and ``torch_default_symmetric`` × 5 seeds, to
  15,000 updates, with the authors' loss (``decoder_loss=masked``: their decoders trained through the MLM
  collator) and with the causal next-token loss;
- ``layers12_arms``: the 12-layer decomposition: the four arms × 4 seeds, to 15,000 updates.

Each group of runs (one seed's arms, or part of them; with ``--group-by init``, one arm's seeds; with
``--group-by run``, one run) is one
``attngeom train --seeds … --inits …`` process (its runs stacked in one compiled step); groups are spread
over the GPUs by their expected tokens (longest first, each to the least loaded GPU) and share a GPU by
time-slicing. A run's data order and masking come from its seed alone, so seed pairs stay paired across
processes. Loss every update, scores and a
checkpoint every 1,000: a run stopped early resumes from its folder when the same command runs again.

    python benchmarks/init_arms.py plan --gpus 4                   # the groups and their GPUs
    python benchmarks/init_arms.py plan --gpus 2 --experiments layers12 --group-by init
    python benchmarks/init_arms.py plan --gpus 4 --experiments horizon --group-by run
    python benchmarks/init_arms.py run --gpus 4 --out RUNS         # on the GPU host (blocks until done)
    python benchmarks/init_arms.py status RUNS                     # each run's last logged update
    python benchmarks/init_arms.py collect RUNS ARCHIVE.tar.gz     # the runs' logs, no checkpoints
    python benchmarks/init_arms.py run --device cpu --tiny --experiments horizon --group-by run --gpus 1 --out RUNS
    python benchmarks/repro_training.py --report RUNS --out REPORT      # Table 1 with the authors' columns

``--tiny`` is a CPU smoke test of the plan: 4-layer models of hidden size 32 on 400 paragraphs, 400 updates
(a few minutes on 2 cores for the four runs of ``horizon``), so that Table 1's authors' columns fill.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache" / "training"
ARMS = ("random", "symmetric", "torch_default", "torch_default_symmetric")
TINY_UPDATES = 400
"""``--tiny`` runs stop here unless ``--stop-at`` says otherwise: the authors' runs are logged every 200
updates, so Table 1 sets them beside a run from 400 updates on."""
KEPT = ("config.yaml", "corpus.json", "code.json", "loss.parquet", "scores.parquet")
"""What ``collect`` keeps of a run folder (checkpoints and final models stay behind)."""


@dataclass(frozen=True)
class Experiment:
    name: str
    settings: tuple[str, ...]
    inits: tuple[str, ...]
    seeds: tuple[int, ...]
    stop_at: int
    tokens_per_update: float
    """Expected tokens an update (for spreading groups over GPUs only)."""
    cost_per_token: float = 1.0
    """Relative compute a token (BERT-mini's = 1), for spreading groups over GPUs only."""


AUTHORS = ("random", "torch_default_symmetric")
"""The two arms of the paper's Table 1: BERT's init and the authors' ``--symmetric-init``."""
EXPERIMENTS = (
    Experiment("wordpiece", (), ARMS, tuple(range(5)), 15_000, 24_000),
    Experiment("characters", ("recipe=authors_code_characters",), AUTHORS, tuple(range(3)), 10_000, 77_000),
    Experiment("layers12", ("n_layers=12",), AUTHORS, tuple(range(3)), 4_000, 24_000, 6.0),
    Experiment("horizon", (), AUTHORS, (0, 1), 150_000, 24_000),
    Experiment("wordpiece_more", (), ARMS, (5, 6, 7), 15_000, 24_000),
    Experiment(
        "decoders", ("objective=decoder", "decoder_loss=masked"), AUTHORS, tuple(range(5)), 15_000, 24_000
    ),
    Experiment(
        "decoders_causal",
        ("objective=decoder", "decoder_loss=causal"),
        AUTHORS,
        tuple(range(5)),
        15_000,
        24_000,
    ),
    Experiment("layers12_arms", ("n_layers=12",), ARMS, tuple(range(4)), 15_000, 24_000, 6.0),
)


@dataclass(frozen=True)
class Group:
    experiment: Experiment
    seeds: tuple[int, ...]
    inits: tuple[str, ...]

    @property
    def work(self) -> float:
        e = self.experiment
        return len(self.seeds) * len(self.inits) * e.stop_at * e.tokens_per_update * e.cost_per_token


def groups(names: tuple[str, ...] = ("wordpiece", "characters", "layers12"), by: str = "seed") -> list[Group]:
    """By seed: one group per seed of each named experiment (its arms stacked), the last seed of the four
    word-piece arms in two halves, so that the work spreads evenly over four GPUs. By init: one group per
    arm (its seeds stacked), for as many GPUs as arms. By run: one group per run (a long run alone on a GPU
    is not slowed by the runs stacked beside it)."""
    out = []
    for e in (e for e in EXPERIMENTS if e.name in names):
        if by == "init":
            out += [Group(e, e.seeds, (init,)) for init in e.inits]
            continue
        if by == "run":
            out += [Group(e, (seed,), (init,)) for seed in e.seeds for init in e.inits]
            continue
        for seed in e.seeds:
            halves = len(e.inits) == 4 and seed == e.seeds[-1]
            parts = (e.inits[:2], e.inits[2:]) if halves else (e.inits,)
            out += [Group(e, (seed,), part) for part in parts]
    return out


def assign(items: list[Group], gpus: int) -> dict[int, list[Group]]:
    """Longest processing time first: each group, largest first, to the GPU with the least work so far."""
    load = {g: [] for g in range(gpus)}
    for group in sorted(items, key=lambda g: -g.work):
        gpu = min(load, key=lambda g: sum(x.work for x in load[g]))
        load[gpu].append(group)
    return load


def command(group: Group, out: Path, args: argparse.Namespace) -> list[str]:
    """The ``attngeom train`` command of one group."""
    e = group.experiment
    tiny = (  # 4 layers and 400 updates: the least at which the authors' BERT-mini columns fill (Table 1)
        ["hidden_size=32", "n_heads=4", "intermediate_size=64", "seq_len=64", "batch_documents=8",
         "grad_accum=1", "max_documents=400", "score_every=100", "checkpoint_every=100", "log_every=20"]
        if args.tiny else ["score_every=1000", "checkpoint_every=1000", "log_every=100"]
    )  # fmt: skip
    return [
        sys.executable, "-m", "attngeom", "train",
        "--config", str(ROOT / "config" / "paper.yaml"),
        f"dataset={args.cache / 'sotu_paragraphs.txt'}",
        f"tokenizer={args.cache / 'tokenizer.json'}",
        f"cache_dir={args.cache / 'tokens'}",
        f"device={args.device}",
        *(["compile=false"] if args.device == "cpu" else []),
        *e.settings,
        *tiny,
        "--seeds", ",".join(map(str, group.seeds)),
        "--inits", ",".join(group.inits),
        "--stop-at", str(args.stop_at or (TINY_UPDATES if args.tiny else e.stop_at)),
        "--log-lines",
        "--out", str(out / f"{e.name}-{{init}}-s{{seed}}"),
    ]  # fmt: skip


def group_name(group: Group) -> str:
    return f"{group.experiment.name}-s{'_'.join(map(str, group.seeds))}-{'_'.join(group.inits)}"


def run(args: argparse.Namespace) -> int:
    """Start every group (or those named in ``--only``) on its GPU, wait for all; their output goes to
    OUT/logs/."""
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    processes = []
    chosen = [
        g for g in groups(args.experiments, args.group_by) if not args.only or group_name(g) in args.only
    ]
    for gpu, assigned in assign(chosen, args.gpus).items():
        for group in assigned:
            name = group_name(group)
            visible = str(args.first_gpu + gpu) if args.device == "cuda" else ""
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
            log = (args.out / "logs" / f"{name}.log").open("a")
            processes.append(
                (name, subprocess.Popen(command(group, args.out, args), stdout=log, stderr=log, env=env))
            )
            print(f"gpu {args.first_gpu + gpu}: {name}", flush=True)
    failed = [name for name, p in processes if p.wait() != 0]
    print(f"{len(processes) - len(failed)} of {len(processes)} groups finished; failed: {failed or 'none'}")
    return 1 if failed else 0


def status(folder: Path) -> pd.DataFrame:
    rows = []
    for run in sorted(p for p in folder.iterdir() if (p / "config.yaml").is_file()):
        loss = run / "loss.parquet"
        log = pd.read_parquet(loss) if loss.is_file() else pd.DataFrame({"step": [0], "elapsed_s": [0.0]})
        rows.append(
            {"run": run.name, "step": int(log["step"].max()), "elapsed_s": float(log["elapsed_s"].max())}
        )
    return pd.DataFrame(rows)


def collect(folder: Path, archive: Path) -> None:
    """The runs' records (``KEPT``) and the logs, in one archive."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and (
                path.name in KEPT and path.parent.parent == folder or path.parent.name == "logs"
            ):
                tar.add(path, arcname=str(path.relative_to(folder)))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("plan", "run", "status", "collect"))
    parser.add_argument("folder", nargs="*", type=Path, help="status: RUNS; collect: RUNS ARCHIVE")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument(
        "--first-gpu", type=int, default=0, help="run: use GPUs first-gpu … first-gpu + gpus − 1"
    )
    parser.add_argument("--out", type=Path, help="run: where the runs' folders go")
    parser.add_argument(
        "--cache", type=Path, default=CACHE, help="corpus and tokenizer (bench_training.py prepare)"
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument(
        "--tiny", action="store_true", help="a small model and corpus: a smoke test of the plan"
    )
    parser.add_argument(
        "--experiments",
        nargs="+",
        choices=[e.name for e in EXPERIMENTS],
        default=("wordpiece", "characters", "layers12"),
        help="which experiments (default: the first three, run on 4 H100s on 2026-11-27)",
    )
    parser.add_argument(
        "--group-by",
        choices=("seed", "init", "run"),
        default="seed",
        help="one process per seed (its arms stacked), per arm (its seeds stacked) or per run",
    )
    parser.add_argument("--stop-at", type=int, help="stop every run here (default: each experiment's)")
    parser.add_argument(
        "--only", nargs="+", metavar="GROUP", help="run: only these groups (names as `plan` prints)"
    )
    args = parser.parse_args()
    if args.action == "plan":
        for gpu, assigned in assign(groups(args.experiments, args.group_by), args.gpus).items():
            work = sum(g.work for g in assigned) / 1e9
            print(
                f"gpu {gpu} ({work:.2f}G tokens, BERT-mini equivalents): "
                + ", ".join(group_name(g) for g in assigned)
            )
        return 0
    if args.action == "run":
        if args.out is None:
            parser.error("run needs --out")
        return run(args)
    if args.action == "status":
        print(status(args.folder[0]).to_string(index=False))
        return 0
    collect(*args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
