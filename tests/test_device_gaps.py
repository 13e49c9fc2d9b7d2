"""The idle stretches of a GPU in a profiler trace, and what the host was doing as each ended: here on a
small trace in torch.profiler's Chrome format, laid out by hand so that each stretch has one known cause."""

from __future__ import annotations

import json

import device_gaps  # benchmarks/, on the import path through tests/bench_support.py
import pytest


def _x(cat: str, name: str, ts: float, dur: float, correlation: int | None = None) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {}}
    if correlation is not None:
        event["args"]["correlation"] = correlation
    return event


def trace() -> dict:
    """Three kernels. The second is queued early (launched at 12 µs in aten::mm) but follows a 30 µs copy
    wait; the third is launched at 150 µs, inside aten::gelu, after the host sat 40 µs in a stream
    synchronisation that began while the device was idle."""
    return {
        "traceEvents": [
            _x("cpu_op", "aten::linear", 0, 20),
            _x("cpu_op", "aten::mm", 10, 5),
            _x("cuda_runtime", "cudaLaunchKernel", 2, 2, correlation=1),
            _x("cuda_runtime", "cudaLaunchKernel", 12, 2, correlation=2),
            _x("kernel", "gemm_a", 10, 40, correlation=1),  # busy 10..50
            _x("kernel", "gemm_b", 80, 20, correlation=2),  # idle 50..80, busy 80..100
            _x("cuda_runtime", "cudaStreamSynchronize", 105, 40),
            _x("cpu_op", "aten::gelu", 148, 10),
            _x("cuda_runtime", "cudaLaunchKernel", 150, 2, correlation=3),
            _x("kernel", "gelu_kernel", 160, 5, correlation=3),  # idle 100..160
            _x("kernel", "tiny", 165.5, 1),  # 0.5 µs after the last: not a stretch
        ]
    }


def test_each_idle_stretch_is_found_with_the_launch_that_ended_it():
    gaps = device_gaps.idle_gaps(trace())
    assert gaps["idle_us"].tolist() == pytest.approx([30.0, 60.0])
    assert gaps["next"].tolist() == ["gemm_b", "gelu_kernel"]
    assert gaps["host_late"].tolist() == [False, True]
    assert gaps["launched_in"].tolist() == ["aten::mm", "aten::gelu"]
    assert gaps["blocking"].tolist() == ["", "cudaStreamSynchronize"]


def test_the_summary_is_per_update_and_largest_first(tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace()))
    result = device_gaps.report(path, updates=2)
    assert result["idle_ms_per_update"] == pytest.approx(0.045)
    assert result["host_late_ms_per_update"] == pytest.approx(0.030)
    first = result["by_launch"][0]
    assert (
        first["launched_in"] == "aten::gelu" and first["ms"] == pytest.approx(0.030) and first["gaps"] == 0.5
    )
    # the whole timeline: 10 → 166.5 µs, busy 66 µs; 0.5 µs of its 90.5 idle in a gap under 5 µs
    assert result["span_ms_per_update"] == pytest.approx(0.07825)
    assert result["busy_ms_per_update"] == pytest.approx(0.033)
    assert result["all_idle_ms_per_update"] == pytest.approx(0.04525)
    assert result["pieces_per_update"] == 2 and result["median_gap_us"] == pytest.approx(30.0)
    printed = capsys.readouterr().out
    assert "idle 0.045 ms: 0.000 ms in gaps under 5 µs" in printed and "cudaStreamSynchronize" in printed


def test_a_trace_without_device_work_has_no_stretches():
    gaps = device_gaps.idle_gaps({"traceEvents": [_x("cpu_op", "aten::mm", 0, 5)]})
    assert gaps.empty and device_gaps.summary(gaps, updates=1).empty
    assert device_gaps.occupancy({"traceEvents": []})["pieces"] == 0
