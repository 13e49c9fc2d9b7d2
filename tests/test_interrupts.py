"""SIGINT and SIGTERM end a command with one line, exit code 128 + signal, and no temporary left behind.

The signals are sent once the command's handlers are surely installed (its process has mapped torch's
library, which ``main`` imports only after installing them), at delays spread over the scoring itself.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from attngeom.packaged import packaged_model_path

MINILM = packaged_model_path("all-MiniLM-L6-v2")


def _wait_for_torch(process: subprocess.Popen, limit_s: float = 120) -> None:
    """Until ``process`` has mapped libtorch (its handlers are installed by then)."""
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the command ended before torch was imported: {process.stderr.read()}")
        try:
            if "libtorch" in maps.read_text():
                return
        except OSError:
            pass
        time.sleep(0.01)
    pytest.fail("the command never imported torch")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_scoring_ends_in_one_line_and_leaves_no_temporary(tmp_path, signum):
    rng = random.Random(signum)
    for trial in range(6):
        out = tmp_path / f"scores{trial}.parquet"
        process = subprocess.Popen(
            [sys.executable, "-m", "attngeom.cli", "score", str(MINILM), "-o", str(out), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for_torch(process)
        time.sleep(rng.uniform(0.0, 1.0))
        alive = process.poll() is None
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
        assert _leftovers(tmp_path) == [], f"trial {trial}"
        if process.returncode == 0:  # it had finished (written its result) before the signal came
            assert not alive or stderr == "", f"trial {trial}: the signal was swallowed"
            assert pq.read_table(out).num_rows > 0
            continue
        assert process.returncode == 128 + signum, f"trial {trial}: {process.returncode} {stderr}"
        assert stderr.splitlines() == [
            f"attngeom: interrupted by {signal.Signals(signum).name}; no partial output was left"
        ]
        if out.exists():  # the result was complete and renamed into place just before the signal
            assert pq.read_table(out).num_rows > 0


def _run_script(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)


def test_sigterm_in_the_middle_of_an_atomic_write_removes_the_temporary(tmp_path):
    result = _run_script(
        f"""
        import os, signal
        from attngeom import interrupts
        from attngeom.files import atomic_dir, atomic_path

        interrupts.install()
        with atomic_dir({str(tmp_path / "run")!r}) as folder:
            (folder / "half").write_text("x")
            with atomic_path({str(tmp_path / "out.parquet")!r}) as temporary:
                temporary.write_bytes(b"half a file")
                os.kill(os.getpid(), signal.SIGTERM)
        print("not reached")
        """,
        tmp_path,
    )
    assert result.returncode == 128 + signal.SIGTERM
    assert result.stdout == ""
    assert result.stderr.splitlines() == ["attngeom: interrupted by SIGTERM; no partial output was left"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["script.py"]


def test_a_forked_child_leaves_quietly_and_keeps_the_parents_temporaries(tmp_path):
    """The parent prints the one line; a child's exit does not remove what the parent is writing."""
    result = _run_script(
        f"""
        import os, signal
        from attngeom import interrupts
        from attngeom.files import atomic_path

        interrupts.install()
        with atomic_path({str(tmp_path / "out.txt")!r}) as temporary:
            temporary.write_text("the parent's")
            child = os.fork()
            if child == 0:
                os.kill(os.getpid(), signal.SIGTERM)
            _, status = os.waitpid(child, 0)
            print(os.waitstatus_to_exitcode(status), temporary.exists())
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.split() == [str(128 + signal.SIGTERM), "True"]
    assert (tmp_path / "out.txt").read_text() == "the parent's"


def test_handlers_are_installed_only_for_the_command(tmp_path):
    """``main([...])`` called from Python (a notebook, the tests) leaves the caller's handlers alone."""
    from attngeom.cli import main

    before = signal.getsignal(signal.SIGTERM)
    assert main(["score", str(tmp_path / "missing"), "-o", str(tmp_path / "x.parquet"), "--quiet"]) == 2
    assert signal.getsignal(signal.SIGTERM) is before
    assert os.listdir(tmp_path) == []
