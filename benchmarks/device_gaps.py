"""Where the GPU waits: the idle stretches between its kernels in a profiler trace, and what the host was
doing when each one ended.

An update whose wall time exceeds the sum of its kernels' times leaves the device idle somewhere. In a
torch.profiler trace (Chrome format, ``prof.export_chrome_trace``) every kernel, copy and fill on the GPU
carries the correlation id of the host call that launched it. For each idle stretch this finds that launch
and the innermost host operator around it: if the launch came after the device went idle, the host was
late (Python, a guard, a synchronising call); if it came before, the device waited on something else (a
copy, an event). Host runtime calls that block (synchronise, free, allocate pinned memory) and overlap an
idle stretch are named too. Called by ``profile_training.py --trace``.
"""

from __future__ import annotations

import argparse
import bisect
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
"""Trace categories of work on the GPU."""
HOST_OPS = ("cpu_op", "user_annotation")
BLOCKING = ("Synchronize", "cudaFree", "cudaMalloc", "HostAlloc")
"""Runtime calls that can hold the host until the device catches up (with the plain, synchronous
``cudaMemcpy``)."""
SEARCH_BACK = 4000
"""How many host operators before a launch are searched for the ones around it."""


def _blocking(name: str) -> bool:
    return name == "cudaMemcpy" or any(word in name for word in BLOCKING)


def device_work(trace: dict) -> list[dict]:
    """The trace's kernels, copies and fills on the GPU, by start time."""
    events = (e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in DEVICE)
    return sorted(events, key=lambda e: e["ts"])


def _after_idle(work: list[dict]) -> Iterator[tuple[float, dict]]:
    """Each piece of work after the first, with the time the GPU was busy until before it (the union of
    the earlier pieces' ends): the one walk over the timeline that ``occupancy`` and ``idle_gaps`` read."""
    until = work[0]["ts"] + work[0]["dur"] if work else 0.0
    for piece in work[1:]:
        yield until, piece
        until = max(until, piece["ts"] + piece["dur"])


def occupancy(trace: dict) -> dict[str, float]:
    """From the GPU's first piece of work to its last (µs): how many pieces, the span, the time busy (their
    union), the time idle and the median gap between consecutive pieces."""
    work = device_work(trace)
    if not work:
        return {"pieces": 0, "span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0, "median_gap_us": 0.0}
    gaps = [piece["ts"] - until for until, piece in _after_idle(work) if piece["ts"] > until]
    span = max(piece["ts"] + piece["dur"] for piece in work) - work[0]["ts"]
    idle = sum(gaps)
    return {
        "pieces": len(work),
        "span_us": span,
        "busy_us": span - idle,
        "idle_us": idle,
        "median_gap_us": float(pd.Series(gaps).median()) if gaps else 0.0,
    }


def idle_gaps(trace: dict, at_least_us: float = 5.0) -> pd.DataFrame:
    """One row per stretch of ≥ ``at_least_us`` µs with no work on the GPU, between its first and last
    piece of work: its length, whether the host launched the next kernel only after the stretch began
    (``host_late``), the innermost host operator around that launch, and the blocking runtime calls that
    overlap the stretch."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    device = device_work(trace)
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    ops = sorted((e for e in events if e.get("cat") in HOST_OPS), key=lambda e: e["ts"])
    op_starts = [e["ts"] for e in ops]
    blocking = sorted(
        (e for e in events if e.get("cat") == "cuda_runtime" and _blocking(e["name"])), key=lambda e: e["ts"]
    )
    rows = []
    for busy_until, work in _after_idle(device):
        gap = work["ts"] - busy_until
        if gap >= at_least_us:
            launch = launches.get(work.get("args", {}).get("correlation"))
            when = launch["ts"] if launch else None
            overlapping = {
                b["name"] for b in blocking if b["ts"] < work["ts"] and b["ts"] + b["dur"] > busy_until
            }
            rows.append(
                {
                    "start_us": busy_until,
                    "idle_us": gap,
                    "next": work["name"],
                    "host_late": when is not None and when > busy_until,
                    "launched_in": _innermost(ops, op_starts, when) if when is not None else "?",
                    "blocking": ", ".join(sorted(overlapping)),
                }
            )
    return pd.DataFrame(rows, columns=["start_us", "idle_us", "next", "host_late", "launched_in", "blocking"])


def _innermost(ops: list[dict], starts: list[float], when: float) -> str:
    """The shortest host operator running at ``when``."""
    index = bisect.bisect_right(starts, when)
    around = [e for e in ops[max(0, index - SEARCH_BACK) : index] if e["ts"] + e["dur"] >= when]
    return min(around, key=lambda e: e["dur"])["name"] if around else "(no operator)"


def summary(gaps: pd.DataFrame, updates: int, top: int = 10) -> pd.DataFrame:
    """Idle ms per update by where the next launch came from (and whether the host was late), largest
    first."""
    if gaps.empty:
        return pd.DataFrame(columns=["launched_in", "host_late", "blocking", "ms", "gaps"])
    grouped = gaps.groupby(["launched_in", "host_late", "blocking"], as_index=False).agg(
        ms=("idle_us", "sum"), gaps=("idle_us", "size")
    )
    grouped["ms"] /= 1e3 * updates
    grouped["gaps"] /= updates
    return grouped.sort_values("ms", ascending=False).head(top).reset_index(drop=True)


def report(path: Path, updates: int, at_least_us: float = 5.0) -> dict:
    """Print and return the device's time in the trace at ``path``, per update: busy, idle between
    consecutive pieces of work, idle in longer stretches and where their next launch came from."""
    trace = json.loads(path.read_text())
    whole = occupancy(trace)
    gaps = idle_gaps(trace, at_least_us)
    table = summary(gaps, updates)
    idle = gaps["idle_us"].sum() / 1e3 / updates
    late = gaps.loc[gaps["host_late"], "idle_us"].sum() / 1e3 / updates
    span, busy, all_idle = (whole[key] / 1e3 / updates for key in ("span_us", "busy_us", "idle_us"))
    print(
        f"\ndevice, per update: {whole['pieces'] / updates:,.0f} kernels, copies and fills; {span:.3f} ms from the "
        f"first to the last, busy {busy:.3f} ms, idle {all_idle:.3f} ms: {all_idle - idle:.3f} ms in gaps under "
        f"{at_least_us:g} µs between consecutive pieces (median gap {whole['median_gap_us']:.2f} µs), {idle:.3f} ms "
        f"in {len(gaps) / updates:.1f} stretches of ≥ {at_least_us:g} µs, {late:.3f} ms of it with the next "
        "launch after the device went idle (the host late):"
    )
    for row in table.itertuples():
        block = f"  [blocking: {row.blocking}]" if row.blocking else ""
        print(
            f"  {row.ms:8.3f} ms {row.gaps:6.1f}×  {'host late' if row.host_late else 'queued   '}  {row.launched_in[:90]}{block}"
        )
    return {
        "pieces_per_update": whole["pieces"] / updates,
        "span_ms_per_update": span,
        "busy_ms_per_update": busy,
        "all_idle_ms_per_update": all_idle,
        "median_gap_us": whole["median_gap_us"],
        "idle_ms_per_update": idle,
        "host_late_ms_per_update": late,
        "stretches_per_update": len(gaps) / updates,
        "by_launch": table.to_dict(orient="records"),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="a Chrome trace of torch.profiler (export_chrome_trace)")
    parser.add_argument(
        "--updates", type=int, default=1, help="updates in the trace (figures are per update)"
    )
    parser.add_argument("--at-least-us", type=float, default=5.0, help="shortest idle stretch counted")
    args = parser.parse_args(argv)
    report(args.trace, args.updates, args.at_least_us)


if __name__ == "__main__":
    main()
