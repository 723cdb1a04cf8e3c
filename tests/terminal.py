"""Helpers for the Ctrl-C tests: a large sweep made of real trial dirs, and a terminal.

The signal goes to the whole process group, as a terminal sends it, once the progress bar
says reading has begun (stderr is a pseudo-terminal, as for a user who presses Ctrl-C).
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import experiment_dir, validate


def large_sweep(fixtures: Path, into: Path, trials: int) -> Path:
    """tune_trial_error's three real trial dirs, hard-linked under `trials` trial names."""
    source = experiment_dir(fixtures, "tune_trial_error")
    sweep = into / "large_sweep"
    sweep.mkdir()
    for item in source.iterdir():
        if item.is_file():
            shutil.copy(item, sweep / item.name)
    models = sorted(d for d in source.iterdir() if d.is_dir())
    for i in range(trials):
        model = models[i % len(models)]
        name = model.name.replace("b0523_0000", f"b0523_{i:05d}_")
        shutil.copytree(model, sweep / name, copy_function=os.link)
    return sweep


class Terminal:
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


@contextmanager
def inspect_on_a_terminal(
    target: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen, Terminal]]:
    """`ray-doctor inspect TARGET --format json`, stderr on a pseudo-terminal (so the progress
    bar shows), in a process group of its own (signalled as a terminal would); killed if still
    running on leaving the block. What it printed there is `terminal.seen`."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "ray_doctor", "inspect", target, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**os.environ, **(env or {}), "NO_COLOR": "1", "COLUMNS": "120"},
        start_new_session=True,
    )
    os.close(follower)
    terminal = Terminal(leader)
    try:
        yield child, terminal
    finally:
        if child.poll() is None:
            child.kill()
        terminal.close()
        os.close(leader)


def partial_report(child: subprocess.Popen, messages: bytes, out: bytes) -> dict:
    """What a user sees after Ctrl-C: exit 130, a one-line note and no traceback on the
    terminal, and a valid report whose errors say the reading was interrupted."""
    assert child.returncode == 130
    assert b"Traceback" not in messages and b"interrupted" in messages
    report = validate(json.loads(out))
    reasons = [e["reason"] for e in report["errors"]]
    assert any(r.startswith("interrupted after reading") for r in reasons), reasons
    return report
