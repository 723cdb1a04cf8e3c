"""Run the stage runner as a child process, bound it in time, and leave nothing behind.

The child gets a session of its own, so a Ctrl-C at the terminal reaches only this process,
which then stops the child in order: SIGINT (the child shuts Ray down), then SIGKILL for the
child's process group, then a sweep for any process of this run that is still alive. Every
process of the run carries RAY_DOCTOR_SMOKE_TOKEN in its environment (Ray's processes inherit
it from the driver that started them); the processes of a Ray instance smoke started also
name its private temp dir on their command line. Nothing else is ever signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_doctor.smoke._model import SmokeOptions
from ray_doctor.smoke._runner import EVENTS, OPTIONS

TOKEN_ENV = "RAY_DOCTOR_SMOKE_TOKEN"
LOG = "runner.log"
POLL_S = 0.1
STOP_GRACE_S = 20.0  # for the child to shut Ray down after SIGINT
SWEEP_GRACE_S = 5.0
EXIT_GRACE_S = 10.0  # for Ray's workers to exit after ray.shutdown(), before they are killed


@dataclass
class RunnerOutcome:
    events: list[dict[str, Any]] = field(default_factory=list)
    ended: str = "done"  # done, timeout, interrupted, crashed
    returncode: int | None = None
    log: Path | None = None
    leftovers: list[str] = field(default_factory=list)  # processes the sweep had to kill

    def log_tail(self, lines: int = 20) -> str:
        if self.log is None or not self.log.exists():
            return ""
        with open(self.log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")


class _Tail:
    """New complete lines of a file that another process appends to."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        return [line.decode("utf-8", "replace") for line in complete if line.strip()]


def own_processes(token: str, ray_temp_dir: str | None) -> list:
    """Processes of this smoke run: they carry the token, or name smoke's Ray temp dir."""
    import psutil

    mine = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        if process.pid == os.getpid():
            continue
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            if ray_temp_dir and ray_temp_dir in cmdline:
                mine.append(process)
                continue
            if process.environ().get(TOKEN_ENV) == token:
                mine.append(process)
        except (psutil.Error, OSError):
            continue
    return mine


def sweep(token: str, ray_temp_dir: str | None) -> list[str]:
    """Terminate, then kill, whatever of this run is still alive; say what it was.

    Ray's workers exit on their own a moment after their raylet: give them that moment."""
    import psutil

    deadline = time.monotonic() + EXIT_GRACE_S
    while (processes := own_processes(token, ray_temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    named = []
    for process in processes:
        try:
            named.append(f"{process.pid} {process.name()}")
            process.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(processes, timeout=SWEEP_GRACE_S)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=SWEEP_GRACE_S)
    return named


def _stop(child: subprocess.Popen) -> None:
    """SIGINT, so the child shuts Ray down; then its whole process group goes."""
    if child.poll() is None:
        try:
            child.send_signal(signal.SIGINT)
            child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    if child.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


@dataclass
class _DeferredInterrupt:
    seen: bool = False

    def note(self, signum, frame) -> None:
        self.seen = True


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[_DeferredInterrupt]:
    """Ctrl-C during clean-up is noted, not raised: stopping Ray, the sweep and the partial
    report must still happen, and the run still ends as interrupted (exit 130)."""
    deferred = _DeferredInterrupt()
    if threading.current_thread() is not threading.main_thread():
        yield deferred
        return
    previous = signal.signal(signal.SIGINT, deferred.note)
    try:
        yield deferred
    finally:
        signal.signal(signal.SIGINT, previous)


def run_runner(
    options: SmokeOptions,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    extra_env: dict[str, str] | None = None,
) -> RunnerOutcome:
    work = Path(options.work_dir)
    (work / OPTIONS).write_text(json.dumps(options.to_json()))
    outcome = RunnerOutcome(log=work / LOG)
    env = {**os.environ, **(extra_env or {}), TOKEN_ENV: options.token, "PYTHONUNBUFFERED": "1"}
    deadline = time.monotonic() + options.timeout_s
    tail = _Tail(work / EVENTS)
    with open(work / LOG, "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "ray_doctor.smoke._runner", str(work / OPTIONS)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        while child.poll() is None:
            if time.monotonic() >= deadline:
                outcome.ended = "timeout"
                break
            _drain(tail, outcome, on_event)
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        outcome.ended = "interrupted"
    finally:
        with interrupts_deferred() as deferred:
            _stop(child)
            _drain(tail, outcome, on_event)
            outcome.returncode = child.returncode
            outcome.leftovers = sweep(options.token, options.ray_temp_dir)
        if deferred.seen:
            outcome.ended = "interrupted"
    if outcome.ended == "done" and not any(
        e["type"] in ("done", "interrupted") for e in outcome.events
    ):
        outcome.ended = "crashed"
    return outcome


def _drain(tail: _Tail, outcome: RunnerOutcome, on_event) -> None:
    for line in tail.lines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        outcome.events.append(event)
        if on_event is not None:
            on_event(event)
