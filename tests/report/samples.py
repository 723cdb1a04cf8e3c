"""Reports the format tests (and docs/generate.py) render: inspect and verify-checkpoint
from the bundled fixtures, and a smoke run built from the smoke model (its command lands on
another branch; the report contract is here)."""

from __future__ import annotations

from pathlib import Path

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence
from ray_doctor.report import Report, build_inspect_report, build_smoke_report, build_verify_report
from ray_doctor.rules import REGISTRY, run_rules
from ray_doctor.rules._docs import example_logs
from ray_doctor.scan import scan
from ray_doctor.smoke._model import SmokeResult, StageResult, StageStatus

REPO = Path(__file__).resolve().parents[2]


def inspect_report(scenario_dir: Path, fail_on: str = "error", logs: bool = True) -> Report:
    """What `ray-doctor inspect DIR [--logs ...]` reports, built in-process."""
    result = scan(str(scenario_dir), [str(p) for p in example_logs(scenario_dir)] if logs else [])
    return build_inspect_report(result, run_rules(result), fail_on)


def verify_report(target: Path, fail_on: str = "error") -> Report:
    """What `ray-doctor verify-checkpoint --all DIR` reports."""
    from ray_doctor.checkpoint import diagnose, verify_all

    result = verify_all(str(target))
    return build_verify_report(result, diagnose(result), fail_on)


def _finding(rule_id: str, message: str, evidence: list[Evidence]) -> Finding:
    rule = REGISTRY[rule_id]
    return Finding(
        rule=rule.id,
        severity=rule.severity,
        title=rule.title,
        message=message,
        fix="See the rule's documentation.",
        evidence=evidence,
        docs=rule.docs_url(),
    )


def smoke_result() -> SmokeResult:
    """A smoke run on a 2-node cluster: one stage of each status, evidence that is no file."""
    port = _finding(
        "port-conflict",
        "Port 29500 is already in use on node 10.0.0.3: the Train worker group cannot start.",
        [Evidence("node 10.0.0.3", None, "bind(('0.0.0.0', 29500)): [Errno 98] Address in use")],
    )
    storage = _finding(
        "storage-unreachable",
        "The checkpoint written to s3://bucket/ray_results/smoke could not be read back.",
        [Evidence("s3://bucket/ray_results/smoke/checkpoint_000000", None, "AccessDenied")],
    )
    storage.severity = Severity.ERROR
    return SmokeResult(
        target="ray://10.0.0.2:10001",
        ray_version="2.60.0",
        duration_s=42.5,
        stages=[
            StageResult("cluster", StageStatus.PASS, 0.4, "2 nodes, 16 CPUs, 2 GPUs"),
            StageResult("device", StageStatus.SKIP, 0.0, "no GPU requested"),
            StageResult(
                "collective",
                StageStatus.ERROR,
                30.0,
                "the worker group did not start within 30 s",
                [Evidence("node 10.0.0.4", None, "worker group start timed out")],
            ),
            StageResult(
                "checkpoint",
                StageStatus.FAIL,
                6.1,
                storage.message,
                storage.evidence,
                {},
                [storage],
            ),
            StageResult("port", StageStatus.FAIL, 0.8, port.message, port.evidence, {}, [port]),
            StageResult("environment", StageStatus.PASS, 5.2, "2 nodes fingerprinted"),
        ],
        environment={
            "driver": {"python": "3.11.7"},
            "nodes": [{"ip": "10.0.0.3"}, {"ip": "10.0.0.4"}],
        },
    )


def smoke_report(fail_on: str = "error") -> Report:
    return build_smoke_report(smoke_result(), fail_on)
