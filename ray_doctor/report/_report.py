"""The report every command emits: built once, rendered by any formatter."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import IntEnum
from typing import Any

from ray_doctor import __version__
from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Experiment, ScanError, ScanResult, Trial, TrialStatus
from ray_doctor.report._groups import group_id

SCHEMA_VERSION = "1.2"  # 1.1: smoke (stages, environment, relaunch); 1.2: findings[].group
FAIL_ON_CHOICES = ("error", "warning", "info", "never")
# Keys Ray fills into every result; the "last metric" shown is the first key not among them.
AUTO_FILLED = {
    "done",
    "training_iteration",
    "trial_id",
    "date",
    "timestamp",
    "time_this_iter_s",
    "time_total_s",
    "pid",
    "hostname",
    "node_ip",
    "time_since_restore",
    "iterations_since_restore",
    "timesteps_since_restore",
    "checkpoint_dir_name",
    "should_checkpoint",
    "experiment_tag",
    "experiment_id",
    "timesteps_total",
    "episodes_total",
    "warmup_time",
    "reports",
}


class ExitCode(IntEnum):
    CLEAN = 0  # nothing at or above --fail-on
    FINDINGS = 1  # findings at or above --fail-on
    COULD_NOT_RUN = 2  # missing path, unreadable storage, bad arguments
    NOTHING_TO_INSPECT = 3  # the path holds no Ray experiment data


def json_safe(value: Any) -> Any:
    """Strict JSON: NaN and infinities become strings. Containers are copied only when
    something in them changes, so a large report is not held twice."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        items = {k: json_safe(v) for k, v in value.items()}
        if all(isinstance(k, str) and items[k] is v for k, v in value.items()):
            return value
        return {str(k): v for k, v in items.items()}
    if isinstance(value, (list, tuple)):
        items = [json_safe(v) for v in value]
        if isinstance(value, list) and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items
    return value


def _safe_flat(values: dict[str, Any]) -> dict[str, Any]:
    """json_safe for a flat dict of scalars (a result row), without walking it twice."""
    for value in values.values():
        if value.__class__ is float and not math.isfinite(value):
            return {k: json_safe(v) for k, v in values.items()}
    return values


def iso(timestamp: float | None) -> str | None:
    if timestamp is None or not math.isfinite(timestamp) or timestamp <= 0:
        return None
    try:
        moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def main_metric(trial: Trial, preferred: str | None = None) -> tuple[str, Any] | None:
    result = trial.last_result
    if preferred and preferred in result:
        return preferred, result[preferred]
    for key, value in result.items():
        if (
            key not in AUTO_FILLED
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            return key, value
    return None


def _trial_dict(experiment: Experiment, trial: Trial) -> dict[str, Any]:
    history = trial.history
    last_checkpoint = trial.last_checkpoint
    metric = main_metric(trial, experiment.runner.get("_metric"))
    return {
        "experiment": experiment.name,
        "trial_id": trial.trial_id,
        "name": trial.name,
        "path": trial.path,
        "status": trial.status.value,
        "iterations": trial.iterations,
        "rows": history.rows if history else None,
        "failures": trial.failure_count,
        "max_failures": trial.max_failures,
        "restarts": history.restart_count if history else 0,
        "metric": {"name": metric[0], "value": json_safe(metric[1])} if metric else None,
        "last_result": _safe_flat(trial.last_result),
        "config": json_safe(trial.config),
        "start_time": iso(trial.start_time),
        "last_result_time": iso(trial.last_result_time),
        "checkpoints": len([c for c in trial.checkpoints if c.exists]),
        "last_checkpoint": last_checkpoint.name if last_checkpoint else None,
        "error_file": trial.error_file,
        "last_error": trial.failures[-1].summary if trial.failures else None,
        "nonfinite_metrics": [n.metric for n in history.nonfinite] if history else [],
        "in_experiment_state": trial.in_state,
    }


def _experiment_dict(experiment: Experiment) -> dict[str, Any]:
    return {
        "name": experiment.name,
        "path": experiment.path,
        "layout": experiment.layout.value,
        "ray_version": experiment.ray_version,
        "state_file": experiment.state_file,
        "state_files": experiment.state_files,
        "start_time": iso(experiment.start_time),
        "end_time": iso(experiment.end_time),
        "trials": len(experiment.trials),
        "logs": experiment.logs,
        "earlier_run_trial_dirs": experiment.earlier_run_dirs,
    }


def _finding_dict(finding: Finding) -> dict[str, Any]:
    item = {
        "rule": finding.rule,
        "severity": finding.severity.value,
        "title": finding.title,
        "message": finding.message,
        "experiment": finding.experiment,
        "trial_id": finding.trial_id,
        "evidence": [
            {"path": e.path, "line": e.line, "excerpt": e.excerpt} for e in finding.evidence
        ],
        "fix": finding.fix,
        "docs": finding.docs,
        "related": [
            {"rule": r.rule, "title": r.title, "message": r.message} for r in finding.related
        ],
    }
    item["group"] = group_id(item)
    return item


def fails(findings: list[Finding], fail_on: str) -> bool:
    if fail_on == "never":
        return False
    threshold = Severity(fail_on).rank
    return any(f.severity.rank >= threshold for f in findings)


@dataclass
class Report:
    """What a command found. `data` is the JSON document, already strict-JSON-safe."""

    command: str
    exit_code: ExitCode
    data: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    scan: ScanResult | None = None

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.data["errors"]


def build_inspect_report(
    result: ScanResult, findings: list[Finding], fail_on: str = "error"
) -> Report:
    trials = [(exp, trial) for exp in result.experiments for trial in exp.trials]
    errors: list[ScanError] = result.all_errors
    if result.layout is None:
        exit_code = ExitCode.NOTHING_TO_INSPECT
    elif fails(findings, fail_on):
        exit_code = ExitCode.FINDINGS
    else:
        exit_code = ExitCode.CLEAN
    versions = {e.ray_version for e in result.experiments if e.ray_version}
    by_status = Counter(trial.status.value for _, trial in trials)
    by_severity = Counter(f.severity.value for f in findings)
    data = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ray-doctor", "version": __version__},
        "command": "inspect",
        "generated_at": iso(datetime.now(tz=timezone.utc).timestamp()),
        "target": {
            "path": result.target,
            "layout": result.layout.value if result.layout else None,
            "ray_version": versions.pop() if len(versions) == 1 else None,
        },
        "summary": {
            "experiments": len(result.experiments),
            "trials": len(trials),
            "trials_by_status": {s.value: by_status.get(s.value, 0) for s in TrialStatus},
            "findings_by_severity": {s.value: by_severity.get(s.value, 0) for s in Severity},
            "errors": len(errors),
            "fail_on": fail_on,
            "exit_code": int(exit_code),
        },
        "experiments": [_experiment_dict(e) for e in result.experiments],
        "trials": [_trial_dict(e, t) for e, t in trials],
        "findings": [_finding_dict(f) for f in findings],
        "errors": [{"path": e.path, "reason": e.reason} for e in errors],
    }
    # Only trial values come from the data (metrics, configs); the rest is ray-doctor's own
    # strings and counts. _trial_dict made those JSON-safe already.
    return Report("inspect", exit_code, data, findings, result)


def could_not_run_report(command: str, target: str, reason: str) -> Report:
    """Exit 2: the report still comes out, with the reason in errors[]."""
    data = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ray-doctor", "version": __version__},
        "command": command,
        "generated_at": iso(datetime.now(tz=timezone.utc).timestamp()),
        "target": {"path": target, "layout": None, "ray_version": None},
        "summary": {
            "experiments": 0,
            "trials": 0,
            "trials_by_status": {s.value: 0 for s in TrialStatus},
            "findings_by_severity": {s.value: 0 for s in Severity},
            "errors": 1,
            "fail_on": None,
            "exit_code": int(ExitCode.COULD_NOT_RUN),
        },
        "experiments": [],
        "trials": [],
        "findings": [],
        "errors": [{"path": target, "reason": reason}],
    }
    return Report(command, ExitCode.COULD_NOT_RUN, data)


def _checkpoint_dict(checkpoint, latest: set[str]) -> dict[str, Any]:
    return {
        "path": checkpoint.path,
        "kind": checkpoint.kind,
        "experiment": checkpoint.experiment,
        "trial_id": checkpoint.trial_id,
        "files": [
            {"path": f.path, "format": f.format, "size": f.size, "tensors": len(f.tensors)}
            for f in checkpoint.files
        ],
        "tensors": len(checkpoint.tensors),
        "problems": len(checkpoint.all_problems),
        "latest_restorable": checkpoint.path in latest,
    }


def build_verify_report(result, findings: list[Finding], fail_on: str = "error") -> Report:
    """The verify-checkpoint report: same contract as inspect's, with checkpoints[]."""
    latest = {path for _, _, path in result.latest_restorable if path}
    if not result.checkpoints and not findings:
        exit_code = ExitCode.NOTHING_TO_INSPECT
    elif fails(findings, fail_on):
        exit_code = ExitCode.FINDINGS
    else:
        exit_code = ExitCode.CLEAN
    by_severity = Counter(f.severity.value for f in findings)
    data = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ray-doctor", "version": __version__},
        "command": "verify-checkpoint",
        "generated_at": iso(datetime.now(tz=timezone.utc).timestamp()),
        "target": {"path": result.target, "layout": result.layout, "ray_version": None},
        "summary": {
            "checkpoints": len(result.checkpoints),
            "files": sum(len(c.files) for c in result.checkpoints),
            "tensors": sum(len(c.tensors) for c in result.checkpoints),
            "findings_by_severity": {s.value: by_severity.get(s.value, 0) for s in Severity},
            "errors": len(result.errors),
            "fail_on": fail_on,
            "exit_code": int(exit_code),
        },
        "checkpoints": [_checkpoint_dict(c, latest) for c in result.checkpoints],
        "latest_restorable": [
            {"experiment": exp, "trial_id": trial, "checkpoint": path}
            for exp, trial, path in result.latest_restorable
        ],
        "findings": [_finding_dict(f) for f in findings],
        "errors": [{"path": e.path, "reason": e.reason} for e in result.errors],
    }
    return Report("verify-checkpoint", exit_code, data, findings)


def _stage_dict(stage) -> dict[str, Any]:
    return {
        "name": stage.name,
        "title": stage.title,
        "status": stage.status.value,
        "duration_s": round(stage.duration_s, 3),
        "message": stage.message,
        "evidence": [
            {"path": e.path, "line": e.line, "excerpt": e.excerpt} for e in stage.evidence
        ],
        "details": json_safe(stage.details),
        "rules": [f.rule for f in stage.findings],
    }


def build_smoke_report(result, fail_on: str = "error") -> Report:
    """The smoke report: same contract, with stages[], environment and relaunch.

    Exit 2 when smoke could not start (no cluster) or a stage could not be evaluated and
    nothing else failed; 1 when a finding is at or above `fail_on`; else 0.
    """
    findings = result.findings
    cluster = result.stage("cluster")
    started = cluster is not None and cluster.status.value == "pass"
    if not started and (result.errors or cluster is None or cluster.status.value == "error"):
        exit_code = ExitCode.COULD_NOT_RUN  # no cluster to test: nothing was evaluated
    elif fails(findings, fail_on):
        exit_code = ExitCode.FINDINGS
    elif result.errors or any(s.status.value == "error" for s in result.stages):
        exit_code = ExitCode.COULD_NOT_RUN
    else:
        exit_code = ExitCode.CLEAN
    by_severity = Counter(f.severity.value for f in findings)
    by_status = Counter(s.status.value for s in result.stages)
    data = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ray-doctor", "version": __version__},
        "command": "smoke",
        "generated_at": iso(datetime.now(tz=timezone.utc).timestamp()),
        "target": {"path": result.target, "layout": "cluster", "ray_version": result.ray_version},
        "summary": {
            "stages": len(result.stages),
            "stages_by_status": {s: by_status.get(s, 0) for s in ("pass", "fail", "error", "skip")},
            "findings_by_severity": {s.value: by_severity.get(s.value, 0) for s in Severity},
            "errors": len(result.errors),
            "fail_on": fail_on,
            "exit_code": int(exit_code),
            "duration_s": round(result.duration_s, 3),
        },
        "stages": [_stage_dict(stage) for stage in result.stages],
        "environment": json_safe(result.environment),
        "relaunch": json_safe(result.relaunch),
        "findings": [_finding_dict(f) for f in findings],
        "errors": [{"path": where, "reason": why} for where, why in result.errors],
    }
    return Report("smoke", exit_code, data, findings)
