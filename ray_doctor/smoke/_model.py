"""What a smoke run produces: one result per stage, the environment, and the relaunch verdict.

Plain dataclasses with no Ray or torch in sight: the CLI builds the report from them, and the
stage runner (a child process that does import Ray) sends them back as JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ray_doctor.findings import Finding, Related, Severity
from ray_doctor.model import Evidence


class StageStatus(str, Enum):
    PASS = "pass"  # the check ran and what it checked works
    FAIL = "fail"  # the check ran and found a problem: it carries findings
    ERROR = "error"  # the check could not be evaluated (it crashed, or ran out of time)
    SKIP = "skip"  # not run: not selected, or a stage it needs did not pass


# The stages (names, titles, which run by default) are declared by their modules: see
# ray_doctor/smoke/stages/__init__.py.


def _default_stages() -> tuple[str, ...]:
    from ray_doctor.smoke.stages import default_stages

    return default_stages()


DEFAULT_MASTER_PORT = 29500  # torch.distributed's default, what torchrun and most scripts use
CPU_ALLOCATION_CAP = 1 << 30  # host memory a CPU headroom check touches, at most


@dataclass
class RelaunchPlan:
    """`--from`: what to re-run, resolved by the parent from the experiment on storage."""

    experiment: str  # the experiment dir (path or URI)
    experiment_name: str
    trial_id: str
    entrypoint: str  # module:function or path/file.py:function
    iterations: int
    config: dict[str, Any]
    resources: list[dict[str, float]]  # placement group bundles, e.g. [{"CPU": 1.0}]
    strategy: str = "PACK"
    resources_from: str = "default"  # where the bundles came from
    original: dict[str, Any] | None = None  # the trial's headline finding, as inspect says
    original_iterations: int | None = None  # reported before it failed


@dataclass
class SmokeOptions:
    gpus: int = 0
    workers: int | None = None  # None: one per GPU, or 2 on the CPU
    cpus_per_worker: float = 1.0
    address: str | None = None  # None: start a private local Ray instance
    storage_path: str | None = None  # None: a private temp dir
    timeout_s: float = 300.0
    master_port: int = DEFAULT_MASTER_PORT
    master_port_from: str = "torch's default"
    memory_fraction: float = 0.5
    stages: tuple[str, ...] = field(default_factory=_default_stages)
    keep: bool = False
    relaunch: RelaunchPlan | None = None
    # Set by the parent for the runner:
    work_dir: str = ""  # private temp dir: events, the runner's log, default storage
    ray_temp_dir: str | None = None  # Ray's own temp dir when smoke starts Ray
    token: str = ""  # tags every process of this run (cleanup finds them by it)

    @property
    def worker_count(self) -> int:
        if self.workers is not None:
            return self.workers
        return self.gpus if self.gpus else 2

    @property
    def gpus_per_worker(self) -> float:
        return self.gpus / self.worker_count if self.gpus else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stages"] = list(self.stages)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SmokeOptions:
        data = dict(data)
        data["stages"] = tuple(data["stages"])
        if data.get("relaunch"):
            data["relaunch"] = RelaunchPlan(**data["relaunch"])
        return cls(**data)


@dataclass
class StageResult:
    name: str
    status: StageStatus
    duration_s: float = 0.0
    message: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def title(self) -> str:
        from ray_doctor.smoke.stages import titles

        return titles().get(self.name, self.name)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "duration_s": round(self.duration_s, 3),
            "message": self.message,
            "evidence": [asdict(e) for e in self.evidence],
            "details": self.details,
            "findings": [finding_to_json(f) for f in self.findings],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        return cls(
            name=data["name"],
            status=StageStatus(data["status"]),
            duration_s=float(data.get("duration_s") or 0.0),
            message=data.get("message", ""),
            evidence=[Evidence(**e) for e in data.get("evidence", [])],
            details=data.get("details") or {},
            findings=[finding_from_json(f) for f in data.get("findings", [])],
        )


def finding_to_json(finding: Finding) -> dict[str, Any]:
    data = asdict(finding)
    data["severity"] = finding.severity.value
    return data


def finding_from_json(data: dict[str, Any]) -> Finding:
    """A Finding from `finding_to_json` or from a report's findings[] (which has no
    subject / specificity: those only matter while the rules fold findings)."""
    data = {k: v for k, v in data.items() if k in Finding.__dataclass_fields__}
    data["severity"] = Severity(data["severity"])
    data["evidence"] = [Evidence(**e) for e in data.get("evidence", [])]
    data["related"] = [Related(**r) for r in data.get("related", [])]
    return Finding(**data)


@dataclass
class SmokeResult:
    """Everything one `ray-doctor smoke` run found."""

    target: str  # "local" (a Ray instance smoke started) or the cluster address it joined
    ray_version: str | None = None
    stages: list[StageResult] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    relaunch: dict[str, Any] | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)  # (where, why): could not run
    duration_s: float = 0.0
    ended: str = "done"  # done, timeout, interrupted, crashed

    @property
    def findings(self) -> list[Finding]:
        return [f for stage in self.stages for f in stage.findings]

    def stage(self, name: str) -> StageResult | None:
        for stage in self.stages:
            if stage.name == name:
                return stage
        return None
