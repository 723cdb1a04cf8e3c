"""config-correlated-failures: failures concentrate in one region of the hyper-parameters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, TrialStatus
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
        (ERROR or TERMINATED), and the cause other rules gave each failure. For numbers it
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
        import pandas as pd  # only here: sweeps with enough failures to correlate

        rows = [{**_flatten(t.config), "__failed": t.trial_id in failed_ids} for t in decided]
        frame = pd.DataFrame(rows)
        regions = sorted(
            (r for key in frame.columns if key != "__failed" for r in _regions(frame, key)),
            key=lambda r: (-r.separation, -r.failed_in),
        )
        causes = _causes(experiment, findings, failed_ids)
        reported: set[str] = set()
        for region in regions:
            if len(reported) >= MAX_FINDINGS or region.key in reported:
                continue
            reported.add(region.key)
            message = (
                f"{region.failed_in} of {region.total_in} trials with {region.description} failed"
                f"{causes}, {region.failed_out} of {region.total_out} outside that range."
            )
            evidence = [
                Evidence(
                    t.path or experiment.path,
                    None,
                    f"{region.key}={_value(t.config, region.key)}: {t.status.value}",
                )
                for t in decided
                if t.trial_id in failed_ids
            ][:5]
            fix = (
                "Fix the cause these trials share (see their own findings) or leave the region out "
                f"of the search space (e.g. drop the values where {region.description})."
            )
            yield self.finding(
                experiment, message, fix, evidence, subject=f"config:{experiment.path}:{region.key}"
            )


def _value(config: dict[str, Any], key: str) -> Any:
    return _flatten(config).get(key)


def _regions(frame, key: str) -> Iterator[Region]:
    column = frame[key]
    known = column.notna()
    values = column[known]
    failed = frame["__failed"][known]
    if values.nunique() < 2:
        return
    if all(_is_number(v) for v in values):
        for threshold in sorted(values.unique()):
            for above in (True, False):
                inside = values >= threshold if above else values <= threshold
                sign = ">=" if above else "<="
                yield from _region(key, f"{key} {sign} {threshold:g}", inside, failed)
    else:
        for value in values.unique():
            yield from _region(key, f"{key} = {value}", values == value, failed)


def _region(key: str, description: str, inside, failed) -> Iterator[Region]:
    total_in = int(inside.sum())
    total_out = int((~inside).sum())
    if total_in == 0 or total_out == 0:
        return
    failed_in = int((failed & inside).sum())
    failed_out = int((failed & ~inside).sum())
    if failed_in < MIN_FAILED:
        return
    if failed_in / total_in >= IN_RATE and failed_out / total_out <= OUT_RATE:
        yield Region(key, description, failed_in, total_in, failed_out, total_out)


def _causes(experiment: Experiment, findings: list[Finding], failed_ids: set[str]) -> str:
    """' (oom-cuda x4)' from the headline finding of each failed trial; an unexplained
    trial-error is labelled with its exception type."""
    labels: Counter[str] = Counter()
    for finding in findings:
        if finding.experiment != experiment.name or finding.trial_id not in failed_ids:
            continue
        if finding.severity != Severity.ERROR:
            continue
        label = finding.rule
        trial = experiment.trial(finding.trial_id)
        if label == "trial-error" and trial and trial.failures and trial.failures[-1].exc_type:
            label = trial.failures[-1].exc_type
        labels[label] += 1
    if not labels:
        return ""
    return " (" + ", ".join(f"{label} x{n}" for label, n in labels.most_common(3)) + ")"
