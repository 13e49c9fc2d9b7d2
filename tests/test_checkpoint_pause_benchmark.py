"""The checkpoint-pause benchmark runs end to end on the CPU and reports every save."""

from __future__ import annotations

import sys

import checkpoint_pause  # benchmarks/, on the import path through tests/bench_support.py


def test_the_checkpoint_pause_script_reports_each_save_on_the_cpu(monkeypatch, capsys):
    argv = ["checkpoint_pause.py", "--device", "cpu", "--layers", "4", "--saves", "2", "--work", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    checkpoint_pause.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["save 1", "save 2"]
    assert all("training blocked" in line and "in place" in line for line in lines)
