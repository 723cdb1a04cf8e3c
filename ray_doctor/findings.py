"""The finding: what every command (inspect, verify-checkpoint, smoke) reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ray_doctor.model import Evidence


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 3, "warning": 2, "info": 1}[self.value]


@dataclass(frozen=True)
class Related:
    """A finding folded into a more specific one about the same failure."""

    rule: str
    title: str
    message: str


@dataclass
class Finding:
    rule: str
    severity: Severity
    title: str
    message: str
    fix: str
    experiment: str | None = None
    trial_id: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    docs: str = ""
    # What the finding is about (a trial, a run-level failure); findings that share a subject
    # are one failure, and only the most specific leads.
    subject: str | None = None
    specificity: int = 0
    related: list[Related] = field(default_factory=list)
