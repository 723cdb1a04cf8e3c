"""What the in-run callbacks share: diagnose a scan, print a few-line verdict, write the JSON
report, and never let any of it reach the user's run.

The verdict is grouped by rule: one line for the cause (the first finding's message), one
naming the trials it hit, one with the fix, and at the end where the full report is. Every
line starts with `OWN_LINE_PREFIX`, which ray-doctor's log readers skip, so a driver log that
holds a verdict diagnoses exactly as one that does not.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import ScanResult, one_line
from ray_doctor.scan._logs import OWN_LINE_PREFIX

MAX_GROUPS = 3  # causes printed; the rest are counted and left to the full report
MAX_TRIALS_NAMED = 5
MAX_LINE = 300


@dataclass
class Verdict:
    """The options both callbacks take, and what printing and reporting with them means.

    report_path: where to write the JSON report (the `--format json` contract) when the run
        is diagnosed; None writes nothing and the verdict names the `inspect` command instead.
    min_severity: the least severe finding printed ("error", "warning" or "info").
    quiet_if_healthy: print nothing when no finding reaches `min_severity`.
    stream: where the verdict goes (the driver's output: stdout when None).
    """

    report_path: str | os.PathLike | None = None
    min_severity: str = "warning"
    quiet_if_healthy: bool = True
    stream: TextIO | None = None
    # Seconds each diagnosis took, in order: what a trial event costs the run.
    event_seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.min_severity = Severity(self.min_severity).value  # a bad value fails at once

    def shippable(self) -> Verdict:
        """The options alone, for a callback Ray pickles (Tune's tuner.pkl, Train's
        controller): a stream does not pickle, and the timings belong to this process."""
        return Verdict(self.report_path, self.min_severity, self.quiet_if_healthy)

    def say(self, lines: list[str]) -> None:
        """Print lines; a closed or broken stream loses them rather than raising."""
        if not lines:
            return
        stream = self.stream or sys.stdout
        try:
            stream.write("".join(f"{OWN_LINE_PREFIX}{line}\n" for line in lines))
            stream.flush()
        except Exception:  # the driver's output is gone: nothing left to tell
            pass

    @contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        """Run a diagnosis step: any error in it becomes one line, never the run's failure.
        Its time is recorded in `event_seconds`."""
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            self.say([f"{what} skipped ({type(exc).__name__}: {one_line(str(exc), 200)})"])
        finally:
            self.event_seconds.append(time.perf_counter() - started)

    def shown(self, findings: list[Finding]) -> list[Finding]:
        threshold = Severity(self.min_severity).rank
        return [f for f in findings if f.severity.rank >= threshold]

    def write_report(self, result: ScanResult, findings: list[Finding]) -> str | None:
        """The JSON report at `report_path` (replaced whole, never half written); its path."""
        if self.report_path is None:
            return None
        from ray_doctor.report import JsonFormatter, build_inspect_report

        path = os.fspath(self.report_path)
        report = build_inspect_report(result, findings)
        partial = f"{path}.partial"
        with open(partial, "w", encoding="utf-8") as stream:
            JsonFormatter().write(report, stream)
        os.replace(partial, path)
        return path

    def lines(self, title: str, findings: list[Finding], full_report: str | None) -> list[str]:
        """The grouped verdict: empty when nothing is worth saying and quiet is asked for."""
        shown = self.shown(findings)
        if not shown:
            if self.quiet_if_healthy:
                return []
            return [f"{title}: no findings at or above {self.min_severity}"]
        counts = ", ".join(_counts(shown))
        out = [f"{title}: {counts}"]
        groups = _by_rule(shown)
        for rule, group in list(groups.items())[:MAX_GROUPS]:
            out += _group_lines(rule, group)
        if len(groups) > MAX_GROUPS:
            out.append(f"and {len(groups) - MAX_GROUPS} more causes in the full report")
        if full_report:
            out.append(f"full report: {full_report}")
        return out


def _counts(findings: list[Finding]) -> list[str]:
    out = []
    for severity in Severity:
        count = sum(1 for f in findings if f.severity == severity)
        if count:
            out.append(f"{count} {severity.value}{'s' if count > 1 else ''}")
    return out


def _by_rule(findings: list[Finding]) -> dict[str, list[Finding]]:
    groups: dict[str, list[Finding]] = {}
    for finding in findings:  # the engine's order: most severe first
        groups.setdefault(finding.rule, []).append(finding)
    return groups


def _group_lines(rule: str, group: list[Finding]) -> list[str]:
    first = group[0]
    more = f" (and {len(group) - 1} more like it)" if len(group) > 1 else ""
    out = [f"{first.severity.value} {rule}: {one_line(first.message, MAX_LINE)}{more}"]
    trials = list(dict.fromkeys(f.trial_id for f in group if f.trial_id))
    if trials:
        named = ", ".join(trials[:MAX_TRIALS_NAMED])
        extra = f" +{len(trials) - MAX_TRIALS_NAMED} more" if len(trials) > MAX_TRIALS_NAMED else ""
        out.append(f"  {'trial' if len(trials) == 1 else 'trials'}: {named}{extra}")
    if first.fix:
        out.append(f"  fix: {one_line(first.fix, MAX_LINE)}")
    return out


def inspect_command(target: str) -> str:
    """What to run for the whole report when no report file was asked for."""
    return f"ray-doctor inspect {shlex.quote(target)}"
