"""`inspect --watch`: follow a running experiment, pass after pass, until it ends.

Each pass re-scans the target with one `ScanCache`, so only files whose size or mtime changed
are read again, runs the rules and hands a `Pass` to the caller, which shows it (the CLI: a
live terminal view, or one line per new finding). This module never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

from ray_doctor.findings import Finding
from ray_doctor.model import ScanResult
from ray_doctor.report import Report, build_inspect_report
from ray_doctor.rules import INSPECT_RULES, LIVE_RULES, run_rules
from ray_doctor.scan import ScanCache, ScanFailure, scan


@dataclass
class Pass:
    number: int
    report: Report | None  # None while the target cannot be read yet (waiting: why)
    new_findings: list[Finding] = field(default_factory=list)
    read: int = 0  # trial dirs and state files read in this pass
    reused: int = 0  # ... and unchanged since the previous one
    ended: bool = False  # every experiment found has finished
    waiting: str | None = None
    # Set when the watch gave up on a driver that stopped: nothing changed for `quiet_for`
    # seconds, longer than the sweep's own report cadence allows, and no Ray process runs
    # here (where that can be seen). The report of that pass judges the run as stopped.
    stopped: str | None = None
    cadence: float | None = None  # the sweep's median seconds between result rows


# How many of the sweep's own report intervals without a change mean the driver is gone, and
# the least wait (Tune writes experiment_state on its own clock, every few seconds at least).
QUIET_INTERVALS = 10
MIN_QUIET_S = 20.0
NO_CADENCE_S = 60.0  # when no trial has reported twice yet


def sweep_cadence(result: ScanResult) -> float | None:
    """The median interval between a trial's result rows, over every trial that has two."""
    intervals = [
        (t.history.last_time - t.history.first_time) / (t.history.rows - 1)
        for e in result.experiments
        for t in e.trials
        if t.history and t.history.rows >= 2 and t.history.first_time and t.history.last_time
    ]
    return median(intervals) if intervals else None


def quiet_bound(cadence: float | None) -> float:
    if cadence is None:
        return NO_CADENCE_S
    return max(QUIET_INTERVALS * cadence, MIN_QUIET_S)


def ray_running_here() -> bool | None:
    """Whether a raylet or GCS server runs on this machine (None: cannot tell)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        for proc in psutil.process_iter(["name", "cmdline"]):
            words = " ".join(proc.info.get("cmdline") or [proc.info.get("name") or ""])
            if "/raylet/raylet" in words or "gcs_server" in words:
                return True
    except psutil.Error:
        return None
    return False


def finding_key(finding: Finding) -> tuple[str, str | None, str | None, str | None]:
    return finding.rule, finding.experiment, finding.trial_id, finding.subject


def watch(
    target: str,
    logs: Sequence[str] = (),
    interval: float = 2.0,
    fail_on: str = "error",
    workers: int = 8,
    on_pass: Callable[[Pass], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    ray_here: Callable[[], bool | None] = ray_running_here,
) -> Pass:
    """Scan `target` every `interval` seconds until its experiments end, its driver is found
    stopped (see `Pass.stopped`), or the caller interrupts (KeyboardInterrupt); return the
    last pass. An interrupt during the first pass propagates: there is nothing to report yet."""
    cache = ScanCache()
    seen: set[tuple] = set()
    last: Pass | None = None
    number = 0
    changed_at = clock()
    while True:
        number += 1
        try:
            current = _one_pass(target, logs, fail_on, workers, cache, seen, number)
        except KeyboardInterrupt:
            if last is None:
                raise
            return last
        now = clock()
        if current.read or current.report is None:
            changed_at = now
        elif not current.ended and _driver_gone(now - changed_at, current, local(target), ray_here):
            try:
                current = _one_pass(target, logs, fail_on, workers, cache, seen, number, True)
            except KeyboardInterrupt:
                return last
            current.stopped = (
                f"nothing changed for {now - changed_at:.0f} s, more than "
                f"{quiet_bound(current.cadence):.0f} s ({QUIET_INTERVALS} of the sweep's report "
                "intervals), and no Ray process runs here: the driver stopped"
            )
        last = current
        if on_pass is not None:
            on_pass(current)
        if current.ended or current.stopped:
            return current
        try:
            sleep(interval)
        except KeyboardInterrupt:
            return current


def local(target: str) -> bool:
    return "://" not in target or target.startswith("file://")


def _driver_gone(
    quiet_for: float, current: Pass, is_local: bool, ray_here: Callable[[], bool | None]
) -> bool:
    if quiet_for < quiet_bound(current.cadence):
        return False
    # A local run's Ray processes are visible: while they live, the driver may be waiting.
    return not (is_local and ray_here())


def _one_pass(
    target: str,
    logs: Sequence[str],
    fail_on: str,
    workers: int,
    cache: ScanCache,
    seen: set[tuple],
    number: int,
    stopped: bool = False,
) -> Pass:
    try:
        result = scan(target, logs, workers=workers, cache=cache)
    except ScanFailure as exc:
        # Ray creates the experiment dir a moment after the sweep starts: wait for it.
        return Pass(number, None, waiting=str(exc))
    ended = bool(result.experiments) and all(e.settled for e in result.experiments)
    # A stopped driver is judged like a finished run: unfinished trials are now findings.
    findings = run_rules(result, INSPECT_RULES if ended or stopped else LIVE_RULES)
    new = [f for f in findings if finding_key(f) not in seen]
    seen.update(finding_key(f) for f in new)
    report = build_inspect_report(result, findings, fail_on)
    return Pass(number, report, new, cache.read, cache.reused, ended, cadence=sweep_cadence(result))


__all__ = ["Pass", "finding_key", "watch"]
