"""config-correlated-failures: failures concentrate in one region of the hyper-parameters."""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Trial, TrialStatus
from ray_doctor.rules._base import Rule

MIN_DECIDED = 6  # trials that finished or failed
MIN_FAILED = 2
IN_RATE = 0.8  # failure rate inside the region, at least
OUT_RATE = 0.2  # failure rate outside it, at most
MAX_FINDINGS = 2


@dataclass(frozen=True)
class Region:
    key: str
    description: str  # e.g. "batch_size >= 512"
    contains: Callable[[Any], bool]  # whether a trial's value lies inside
    failed_in: int
    total_in: int
    failed_out: int
    total_out: int

    @property
    def separation(self) -> float:
        inside = self.failed_in / self.total_in
        outside = self.failed_out / self.total_out if self.total_out else 0.0
        return inside - outside


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[name] = value
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class ConfigCorrelatedFailures(Rule):
    """Failures cluster in one region of the search space (e.g. every trial with a large batch).

    Symptom:
        Several trials of a sweep failed, and they share a hyper-parameter region: "4 of 4
        trials with batch_size >= 512 failed, 0 of 8 below".
    Likely cause:
        The failures are caused by the configuration, not by chance or the cluster: a batch
        or model size that does not fit in memory, a learning rate that diverges, an option
        combination the code does not support.
    Evidence it uses:
        Each trial's config (from the experiment state or params.json) and its outcome
        (ERROR or TERMINATED), and the cause other rules gave each failure inside the region. For numbers it
        tries every threshold; for other values every value. It reports a region only when at
        least 80% of the trials inside failed and at most 20% outside, with at least two
        failures; the counts are in the message.
    Fix:
        Fix the cause the failed trials share (see their own findings), or narrow the search
        space so it leaves out the failing region, e.g. `tune.choice` without the largest
        batch sizes, or a smaller upper bound for `tune.loguniform`.
    References:
        - https://docs.ray.io/en/latest/tune/api/search_space.html
        - https://docs.ray.io/en/latest/tune/api/doc/ray.tune.ExperimentAnalysis.html
    """

    id = "config-correlated-failures"
    title = "Failures correlate with the configuration"
    severity = Severity.WARNING
    example = "fixtures/tune_config_correlated"
    needs_findings = True

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        return iter(())  # everything happens in check_findings, after the other rules

    def check_findings(self, experiment: Experiment, findings: list[Finding]) -> Iterator[Finding]:
        decided = [
            t for t in experiment.trials if t.status in (TrialStatus.ERROR, TrialStatus.TERMINATED)
        ]
        failed_ids = {t.trial_id for t in decided if t.status == TrialStatus.ERROR}
        if (
            len(decided) < MIN_DECIDED
            or len(failed_ids) < MIN_FAILED
            or len(failed_ids) == len(decided)
        ):
            return
        # Plain Python: grouping a few thousand configs needs no dataframe library, and
        # importing one cost more than the whole scan of a 1,000-trial sweep.
        columns = _columns(decided, failed_ids)
        regions = sorted(
            (r for key, known in columns.items() for r in _regions(key, known)),
            key=lambda r: (-r.separation, -r.failed_in),
        )
        reported: set[str] = set()
        for region in regions:
            if len(reported) >= MAX_FINDINGS or region.key in reported:
                continue
            reported.add(region.key)
            # The failures this region holds: its causes and evidence are theirs alone.
            inside = [
                (t, value)
                for t in decided
                if t.trial_id in failed_ids
                and (value := _flatten(t.config).get(region.key)) is not None
                and region.contains(value)
            ]
            causes = _causes(experiment, findings, {t.trial_id for t, _ in inside})
            message = (
                f"{region.failed_in} of {region.total_in} trials with {region.description} failed"
                f"{causes}, {region.failed_out} of {region.total_out} outside that range."
            )
            evidence = [
                Evidence(t.path or experiment.path, None, f"{region.key}={value}: {t.status.value}")
                for t, value in inside[:5]
            ]
            fix = (
                "Fix the cause these trials share (see their own findings) or leave the region out "
                f"of the search space (e.g. drop the values where {region.description})."
            )
            yield self.finding(
                experiment, message, fix, evidence, subject=f"config:{experiment.path}:{region.key}"
            )


def _columns(decided: list[Trial], failed_ids: set[str]) -> dict[str, list[tuple[Any, bool]]]:
    """Each config key (in order of first appearance) with the trials that have a value for
    it: (value, failed). None and NaN count as unknown."""
    columns: dict[str, list[tuple[Any, bool]]] = {}
    for trial in decided:
        failed = trial.trial_id in failed_ids
        for key, value in _flatten(trial.config).items():
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            columns.setdefault(key, []).append((value, failed))
    return columns


def _regions(key: str, known: list[tuple[Any, bool]]) -> Iterator[Region]:
    distinct = list(dict.fromkeys(value for value, _ in known))
    if len(distinct) < 2:
        return
    total, failed = len(known), sum(f for _, f in known)
    if all(_is_number(v) for v in distinct):
        yield from _threshold_regions(key, known, total, failed)
        return
    total_by_value = Counter(v for v, _ in known)
    failed_by_value = Counter(v for v, f in known if f)
    for value in distinct:
        counts = (total_by_value[value], failed_by_value[value])
        inside = partial(operator.eq, value)
        yield from _region(key, f"{key} = {value}", inside, total, failed, *counts)


def _threshold_regions(
    key: str, known: list[tuple[Any, bool]], total: int, failed: int
) -> Iterator[Region]:
    """Every `key >= t` and `key <= t`, counted from one sort and running sums: linear in the
    trials after the sort, not trials x distinct values."""
    ordered = sorted(known, key=lambda pair: pair[0])
    failed_before = [0]  # failed_before[i]: failures among ordered[:i]
    for _, is_failed in ordered:
        failed_before.append(failed_before[-1] + is_failed)
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    for i, (value, _) in enumerate(ordered):
        first.setdefault(value, i)
        last[value] = i
    for threshold in first:  # ascending
        start, end = first[threshold], last[threshold] + 1
        above = (total - start, failed - failed_before[start])
        below = (end, failed_before[end])
        at_least = partial(operator.le, threshold)  # threshold <= value
        at_most = partial(operator.ge, threshold)
        yield from _region(key, f"{key} >= {threshold:g}", at_least, total, failed, *above)
        yield from _region(key, f"{key} <= {threshold:g}", at_most, total, failed, *below)


def _region(
    key: str,
    description: str,
    contains: Callable[[Any], bool],
    total: int,
    failed: int,
    total_in: int,
    failed_in: int,
) -> Iterator[Region]:
    total_out, failed_out = total - total_in, failed - failed_in
    if total_in == 0 or total_out == 0 or failed_in < MIN_FAILED:
        return
    if failed_in / total_in >= IN_RATE and failed_out / total_out <= OUT_RATE:
        yield Region(key, description, contains, failed_in, total_in, failed_out, total_out)


def _causes(experiment: Experiment, findings: list[Finding], failed_ids: set[str]) -> str:
    """' (oom-cuda x4)' from the headline finding of each failed trial; an unexplained
    trial-error is labelled with its exception type."""
    labels: Counter[str] = Counter()
    failed_trials = {t.trial_id: t for t in experiment.trials if t.trial_id in failed_ids}
    for finding in findings:
        if finding.experiment != experiment.name or finding.trial_id not in failed_ids:
            continue
        if finding.severity != Severity.ERROR:
            continue
        label = finding.rule
        trial = failed_trials[finding.trial_id]
        if label == "trial-error" and trial and trial.failures and trial.failures[-1].exc_type:
            label = trial.failures[-1].exc_type
        labels[label] += 1
    if not labels:
        return ""
    return " (" + ", ".join(f"{label} x{n}" for label, n in labels.most_common(3)) + ")"
