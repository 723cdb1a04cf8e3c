"""The triage view: findings that share a rule and a cause are one group.

A sweep in which 100 trials died the same way has 100 findings that differ only in the trial
id (and in numbers, paths, hex ids). People read one group: the cause, how many trials, which
ones, one representative's evidence, one fix; a finding that differs is its own group and
stands out. JSON keeps every finding and carries the group id; every human format (terminal,
Markdown, HTML, the GitHub step summary) renders the groups computed here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ray_doctor.report._common import SEVERITY_RANK, by_severity, where

# What varies between trials that failed the same way, masked before comparing messages:
# paths and URIs, Ray trial ids (`b0523_00001`), hex ids (actor, node, worker), numbers.
_PATH = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|(?<![\w.])/)[^\s'\"(),;]+", re.IGNORECASE)
_TRIAL_ID = re.compile(r"\b[0-9a-f]{5}_\d{5}\b")
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.IGNORECASE)
SHOWN_MEMBERS = 5  # members named before "+N more"


def normalised(message: str, trial_id: str | None = None) -> str:
    """The message with what varies between trials masked: equal for the same cause."""
    if trial_id:
        message = message.replace(trial_id, "<trial>")
    if "/" in message:  # every path and URI has one; the search costs 2-3x this test's text
        message = _PATH.sub("<path>", message)
    message = _TRIAL_ID.sub("<trial>", message)
    message = _HEX_ID.sub("<id>", message)
    return _NUMBER.sub("<n>", message)


def group_id(finding: dict[str, Any]) -> str:
    """Stable across runs and machines: the rule and the normalised message, hashed."""
    key = f"{finding['rule']}\n{normalised(finding['message'], finding.get('trial_id'))}"
    return "g-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


@dataclass
class FindingGroup:
    """Findings of one rule with one cause, in report order; the first represents them."""

    id: str
    findings: list[dict[str, Any]]

    @property
    def lead(self) -> dict[str, Any]:
        return self.findings[0]

    @property
    def size(self) -> int:
        return len(self.findings)

    @property
    def trials(self) -> int:
        """Distinct trials affected (0 when the findings are about whole experiments)."""
        return len({(f.get("experiment"), f["trial_id"]) for f in self.findings if f["trial_id"]})

    @property
    def experiments(self) -> int:
        return len({f.get("experiment") for f in self.findings})

    def members(self, shown: int = SHOWN_MEMBERS, base_experiment: bool = True) -> str:
        """'exp / t1, exp / t2, … +97 more'; the experiment is named once when all share it."""
        one_experiment = base_experiment and self.experiments == 1
        names = [(f["trial_id"] or where(f)) if one_experiment else where(f) for f in self.findings]
        text = ", ".join(names[:shown])
        return text + (f" +{len(names) - shown:,} more" if len(names) > shown else "")

    @property
    def count_label(self) -> str:
        """'100 trials' (or '3 experiments') for a group's heading."""
        if self.trials:
            return f"{self.trials:,} trial{'s' if self.trials != 1 else ''}"
        return f"{self.experiments:,} experiment{'s' if self.experiments != 1 else ''}"

    @property
    def cause(self) -> str:
        """The lead's message with its own trial id left out: what the group's trials share."""
        lead = self.lead
        message = lead["message"]
        trial_id = lead.get("trial_id")
        if not trial_id:
            return message
        opening = f"Trial {trial_id} "
        rest = message.replace(opening, "").replace(trial_id, "<trial>")
        # "Trial x failed ..." -> "Failed ...": a sentence again. A message that starts with a
        # path or a name keeps its case ("tune_healthy/tuner.pkl: ...").
        return rest[:1].upper() + rest[1:] if message.startswith(opening) else rest


def subject(group: FindingGroup) -> str:
    """What a group is about, for a heading: 'exp / trial' alone, '100 trials: a, b, … +95
    more' for many."""
    if group.size == 1:
        return where(group.lead)
    return f"{group.count_label}: {group.members()}"


def message(group: FindingGroup) -> str:
    """A lone finding's own message; a group's shared cause."""
    return group.lead["message"] if group.size == 1 else group.cause


def representative_evidence(finding: dict[str, Any], limit: int = 1) -> list[dict[str, Any]]:
    """A group's evidence in a compact view: the lead's last items (a rule lists its
    evidence from the failure's first sign to the line that raised, often the user's code)."""
    return finding["evidence"][-limit:] if limit else []


def is_triage(groups: list[FindingGroup]) -> bool:
    """Some cause is shared by several findings: the report is read as groups."""
    return any(g.size > 1 for g in groups)


def finding_groups(data: dict[str, Any]) -> list[FindingGroup]:
    """The report's findings as groups: most severe first, then in the builder's order."""
    groups: dict[str, FindingGroup] = {}
    for finding in by_severity(data.get("findings", [])):
        key = finding.get("group") or group_id(finding)
        if key in groups:
            groups[key].findings.append(finding)
        else:
            groups[key] = FindingGroup(key, [finding])
    return list(groups.values())


def ranked_causes(groups: list[FindingGroup]) -> list[FindingGroup]:
    """Groups for the "what happened" block: by trials affected, then severity."""
    return sorted(
        groups,
        key=lambda g: (-g.trials, -SEVERITY_RANK.get(g.lead["severity"], 0), -g.size),
    )


def wants_summary(groups: list[FindingGroup]) -> bool:
    """A "what happened" block helps once there is more than one finding to sort out."""
    return sum(g.size for g in groups) > 1
