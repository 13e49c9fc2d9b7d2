"""Where the time of one ``attngeom score MODEL`` goes, phase by phase, in this fresh process.

Times the imports, CUDA's start-up (``--device cuda``), opening the source (config.json, index,
parameter count), and then, around the engine's own functions while ``score_source`` runs, reading the
q/k tensors, hashing their bytes, copying them into the math's dtype and device, the math, building the
rows and writing the Parquet file. Wall and CPU seconds of each; the interpreter's own start-up is the
process's wall time less the phases (``/usr/bin/time`` around this script gives it). On a GPU every
timed call is followed by a synchronisation, so the device's work is charged to the phase that queued
it (which also takes away the overlap of reading layer l + 1 with the math of layer l).

    python benchmarks/scoring_phases.py [MODEL] [--device cuda] [--dtype float32] [--threads N]

MODEL defaults to the synthetic Llama-3.2-1B-shaped checkpoint of ``bench_scoring.py --part model``.
"""

from __future__ import annotations

import time

START = time.perf_counter(), time.process_time()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

DEFAULT = Path(__file__).resolve().parent / ".cache" / "llama-3.2-1b-shaped"


class Phases:
    """Wall and CPU seconds by phase name: consecutive ``mark``s, and calls ``wrap``ped while they run."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.last = START
        self.sync = lambda: None

    def mark(self, name: str) -> None:
        self.sync()
        now = time.perf_counter(), time.process_time()
        self.add(name, now[0] - self.last[0], now[1] - self.last[1])
        self.last = now

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.seconds[name][0] += wall
        self.seconds[name][1] += cpu

    def wrap(self, name: str, function, inner: str | None = None):
        """``function`` timed under ``name``; an ``inner`` phase timed inside it is not counted twice."""

        def timed(*args, **kwargs):
            self.sync()
            before = time.perf_counter(), time.process_time(), list(self.seconds[inner]) if inner else None
            result = function(*args, **kwargs)
            self.sync()
            wall, cpu = time.perf_counter() - before[0], time.process_time() - before[1]
            if inner:
                wall -= self.seconds[inner][0] - before[2][0]
                cpu -= self.seconds[inner][1] - before[2][1]
            self.add(name, wall, cpu)
            return result

        return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(DEFAULT))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    parser.add_argument("--threads", type=int, help="torch threads (default: as attngeom score sets them)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does
    phases = Phases()
    phases.mark("interpreter and argparse")

    import torch

    phases.mark("import torch")
    from attngeom import engine, records
    from attngeom.cli import MATH_THREADS
    from attngeom.sources import open_source

    phases.mark("import attngeom (engine, records, sources)")
    torch.set_num_threads(args.threads or min(torch.get_num_threads(), MATH_THREADS))
    settings = engine.Settings.checked(args.device, engine.DTYPES[args.dtype], "excess", 2.0)
    if settings.device.type == "cuda":
        torch.zeros(1, device=settings.device)
        phases.sync = lambda: torch.cuda.synchronize(settings.device)
        phases.mark("CUDA start-up (context, first kernel)")
    source = open_source(args.model)
    phases.mark("open source (config, index, parameter count)")
    source._load = phases.wrap("read q/k tensors", source._load)
    source.get = phases.wrap("hash q/k bytes (SHA-256)", source.get, inner="read q/k tensors")
    engine._canonical = phases.wrap("copy to the math's dtype and device", engine._canonical)
    engine.score_layer = phases.wrap("math (score_layer)", engine.score_layer)
    engine._layer_rows = phases.wrap("scores to rows", engine._layer_rows)
    engine.to_table = phases.wrap("rows to Arrow table", engine.to_table)
    before = time.perf_counter(), time.process_time()
    counted = [sum(column) for column in zip(*phases.seconds.values(), strict=True)]
    table = engine.score_source(source, settings, progress=False)
    phases.sync()
    after = time.perf_counter(), time.process_time()
    now_counted = [sum(column) for column in zip(*phases.seconds.values(), strict=True)]
    phases.add(
        "engine, the rest (architecture map, loop)",
        after[0] - before[0] - (now_counted[0] - counted[0]),
        after[1] - before[1] - (now_counted[1] - counted[1]),
    )
    phases.last = after
    with tempfile.TemporaryDirectory() as tmp:
        records.write_scores(table, Path(tmp) / "scores.parquet")
    phases.mark("write Parquet")

    total_wall, total_cpu = time.perf_counter() - START[0], time.process_time() - START[1]
    print(
        f"{args.model}: {table.num_rows} rows, device {settings.device}, {args.dtype}, "
        f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'phase':<48} {'wall s':>8} {'CPU s':>8}")
    for name, (wall, cpu) in phases.seconds.items():
        print(f"{name:<48} {wall:8.3f} {cpu:8.3f}")
    print(f"{'total in this process':<48} {total_wall:8.3f} {total_cpu:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
