"""Findings smoke makes, with the registry's ids, titles and severities.

Error text from Ray and torch is classified with the inspect rules' own signature tables
(collective-timeout, nccl-error, port-conflict, ...): one table per cause, whichever command
meets the text.
"""

from __future__ import annotations

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, one_line
from ray_doctor.rules._signature import Signature
from ray_doctor.smoke._resources import GIB


def finding(
    rule_id: str,
    message: str,
    fix: str,
    evidence: list[Evidence],
    severity: Severity | None = None,
    experiment: str | None = None,
    trial_id: str | None = None,
) -> Finding:
    from ray_doctor.rules import REGISTRY

    return REGISTRY[rule_id].make_finding(
        message, evidence, fix, experiment=experiment, trial_id=trial_id, severity=severity
    )


def gib(value: float | int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f} GiB"


def matching_line(signatures: tuple[Signature, ...], text: str) -> tuple[Signature, str] | None:
    """The first line of `text` that one of `signatures` matches."""
    for line in text.splitlines():
        for signature in signatures:
            if signature.pattern.search(line):
                return signature, line.strip()
    return None


def classify(text: str, rule_ids: tuple[str, ...], fallback: str) -> tuple[str, str]:
    """(rule id, the line that shows it): the first of `rule_ids` whose signature table
    matches a line of `text`, else `fallback` with the text's last line."""
    from ray_doctor.rules import REGISTRY

    for rule_id in rule_ids:
        hit = matching_line(getattr(REGISTRY[rule_id], "signatures", ()), text)
        if hit:
            return rule_id, hit[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return fallback, lines[-1] if lines else ""


def text_evidence(where: str, text: str) -> Evidence:
    return Evidence(where, None, one_line(text.strip().splitlines()[-1] if text.strip() else ""))
