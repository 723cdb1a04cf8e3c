"""The rule registry and the engine that runs it over a scan.

`REGISTRY` is the single table of stable rule ids (the public contract). The engine runs every
rule on every experiment, folds findings that describe the same failure under the most specific
one, and sorts what is left by severity. It never prints.
"""

from __future__ import annotations

from collections.abc import Iterable

from ray_doctor.findings import Finding, Related, Severity
from ray_doctor.model import ScanResult
from ray_doctor.rules._base import Rule, RuleDoc
from ray_doctor.rules.recovered_after_failure import RecoveredAfterFailure
from ray_doctor.rules.retries_exhausted import RetriesExhausted
from ray_doctor.rules.trial_error import TrialError
from ray_doctor.rules.trial_incomplete import TrialIncomplete

RULES: tuple[type[Rule], ...] = (
    TrialError,
    TrialIncomplete,
    RetriesExhausted,
    RecoveredAfterFailure,
)
REGISTRY: dict[str, type[Rule]] = {rule.id: rule for rule in RULES}
assert len(REGISTRY) == len(RULES), "two rules share an id"


def fold(findings: Iterable[Finding]) -> list[Finding]:
    """One failure, one headline: per subject, the most specific finding keeps the others."""
    kept: list[Finding] = []
    leaders: dict[str, Finding] = {}
    for finding in sorted(findings, key=lambda f: -f.specificity):
        if finding.subject is None:
            kept.append(finding)
            continue
        leader = leaders.get(finding.subject)
        if leader is None:
            leaders[finding.subject] = finding
            kept.append(finding)
        else:
            leader.related.append(Related(finding.rule, finding.title, finding.message))
    return kept


def run_rules(result: ScanResult, rules: Iterable[type[Rule]] = RULES) -> list[Finding]:
    instances = [rule() for rule in rules]
    findings = [
        finding
        for experiment in result.experiments
        for rule in instances
        for finding in rule.check(experiment)
    ]
    order = {rule.id: i for i, rule in enumerate(RULES)}
    return sorted(
        fold(findings),
        key=lambda f: (
            -f.severity.rank,
            f.experiment or "",
            order.get(f.rule, 99),
            f.trial_id or "",
        ),
    )


__all__ = ["REGISTRY", "RULES", "Finding", "Rule", "RuleDoc", "Severity", "run_rules"]
