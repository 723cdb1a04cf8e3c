"""Ctrl-C during `inspect` of a large sweep: the partial report, exit 130, nothing left behind.

The signal goes to the whole process group, as a terminal sends it, once the progress bar
says reading has begun (stderr is a pseudo-terminal, as for a user who presses Ctrl-C).
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from conftest import experiment_dir, validate

TRIALS = 6000  # enough that reading takes seconds on any machine: the signal lands mid-scan


def _large_sweep(fixtures: Path, into: Path) -> Path:
    """tune_trial_error's three real trial dirs, hard-linked under 6,000 trial names."""
    source = experiment_dir(fixtures, "tune_trial_error")
    sweep = into / "large_sweep"
    sweep.mkdir()
    for item in source.iterdir():
        if item.is_file():
            shutil.copy(item, sweep / item.name)
    trials = sorted(d for d in source.iterdir() if d.is_dir())
    for i in range(TRIALS):
        model = trials[i % len(trials)]
        name = model.name.replace("b0523_0000", f"b0523_{i:05d}_")
        shutil.copytree(model, sweep / name, copy_function=os.link)
    return sweep


class _Terminal:
    """Reads the pseudo-terminal all along, as a terminal does: a writer facing a full pty
    buffer would block, which is a test artefact, not what a user sees."""

    def __init__(self, fd: int) -> None:
        self.fd, self.seen = fd, b""
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            self.seen += chunk

    def wait_for(self, text: bytes, child: subprocess.Popen, limit_s: float = 120) -> bool:
        end = time.monotonic() + limit_s
        while text not in self.seen and child.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        return text in self.seen

    def close(self) -> bytes:
        self._thread.join(timeout=10)
        return self.seen


def test_ctrl_c_during_a_large_inspect_leaves_the_partial_report(fixtures, tmp_path):
    sweep = _large_sweep(fixtures, tmp_path)
    before = sorted(p.name for p in sweep.iterdir())
    leader, follower = pty.openpty()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    child = subprocess.Popen(
        [sys.executable, "-m", "ray_doctor", "inspect", str(sweep), "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
        start_new_session=True,  # its own process group, signalled as a terminal would
    )
    os.close(follower)
    terminal = _Terminal(leader)
    try:
        shown = terminal.wait_for(b"reading large_sweep", child)
        assert shown and child.poll() is None, "inspect ended before the progress bar showed"
        readers = [child.pid] + [c.pid for c in psutil.Process(child.pid).children(True)]
        os.killpg(child.pid, signal.SIGINT)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
        messages = terminal.close()
        os.close(leader)
    assert child.returncode == 130
    assert b"Traceback" not in messages and b"interrupted" in messages
    report = validate(json.loads(out))
    reasons = [e["reason"] for e in report["errors"]]
    assert any(r.startswith("interrupted after reading") for r in reasons), reasons
    read = report["experiments"][0]["trials"]
    assert 0 < read < TRIALS, "the report covers the trials read before Ctrl-C, and only those"
    assert not any(psutil.pid_exists(pid) for pid in readers[1:]), "a reader process outlived it"
    assert sorted(p.name for p in sweep.iterdir()) == before, "inspect wrote into the sweep"
