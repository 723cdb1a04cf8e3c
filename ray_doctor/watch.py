"""`inspect --watch`: follow a running experiment, pass after pass, until it ends.

Each pass re-scans the target with one `ScanCache`, so only files whose size or mtime changed
are read again, runs the rules and hands a `Pass` to the caller, which shows it (the CLI: a
live terminal view, or one line per new finding). This module never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ray_doctor.findings import Finding
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
) -> Pass:
    """Scan `target` every `interval` seconds until its experiments end, or until the caller
    interrupts (KeyboardInterrupt); return the last pass. An interrupt during the first pass
    propagates: there is nothing to report yet."""
    cache = ScanCache()
    seen: set[tuple] = set()
    last: Pass | None = None
    number = 0
    while True:
        number += 1
        try:
            current = _one_pass(target, logs, fail_on, workers, cache, seen, number)
        except KeyboardInterrupt:
            if last is None:
                raise
            return last
        last = current
        if on_pass is not None:
            on_pass(current)
        if current.ended:
            return current
        try:
            sleep(interval)
        except KeyboardInterrupt:
            return current


def _one_pass(
    target: str,
    logs: Sequence[str],
    fail_on: str,
    workers: int,
    cache: ScanCache,
    seen: set[tuple],
    number: int,
) -> Pass:
    try:
        result = scan(target, logs, workers=workers, cache=cache)
    except ScanFailure as exc:
        # Ray creates the experiment dir a moment after the sweep starts: wait for it.
        return Pass(number, None, waiting=str(exc))
    ended = bool(result.experiments) and all(e.settled for e in result.experiments)
    findings = run_rules(result, INSPECT_RULES if ended else LIVE_RULES)
    new = [f for f in findings if finding_key(f) not in seen]
    seen.update(finding_key(f) for f in new)
    report = build_inspect_report(result, findings, fail_on)
    return Pass(number, report, new, cache.read, cache.reused, ended)


__all__ = ["Pass", "finding_key", "watch"]
