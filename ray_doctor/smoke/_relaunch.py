"""`smoke --from`: re-run a failed trial and say whether its failure comes back.

Before the run (in the parent, no Ray): find the trial with inspect's scan, take its config
from params.json, its resources from the placement group Tune pickled into the experiment
state (read by the symbolic pickle machine: bundles come out as data, nothing is executed),
and its headline finding from inspect's rules. After the run: scan the experiment the re-run
wrote with the same scan and rules, and compare causes.
"""

from __future__ import annotations

import json
from typing import Any

from ray_doctor.findings import Finding, Related
from ray_doctor.model import Evidence, Experiment, Layout, Trial, TrialStatus
from ray_doctor.smoke._findings import finding, gib
from ray_doctor.smoke._model import RelaunchPlan, StageResult, StageStatus

RELAUNCH_LAYOUTS = (Layout.TUNE, Layout.TUNE_LEGACY, Layout.TRIAL)
DEFAULT_BUNDLES = [{"CPU": 1.0}]
PICKLED = "<pickled object>"
PARAMS_LIMIT = 16 * 1024 * 1024


class RelaunchError(Exception):
    """--from cannot be planned: the message says why (smoke exits 2)."""


def _find_trial(result, trial_key: str) -> tuple[Experiment, Trial]:
    for experiment in result.experiments:
        trial = experiment.trial(trial_key)
        if trial is not None:
            return experiment, trial
    known = [t.trial_id for e in result.experiments for t in e.trials]
    shown = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
    raise RelaunchError(f"no trial {trial_key!r} in {result.target} (trials: {shown or 'none'})")


def _pickled_values(config: Any, path: str = "") -> list[str]:
    if config == PICKLED:
        return [path or "config"]
    if isinstance(config, dict):
        return [
            p for k, v in config.items() for p in _pickled_values(v, f"{path}.{k}" if path else k)
        ]
    return []


def _params(storage, trial: Trial) -> dict[str, Any] | None:
    """The trial's params.json, as Tune wrote it (JSON only: params.pkl is never read)."""
    from ray_doctor.storage import StorageError

    if trial.path is None:
        return None
    path = storage.join(trial.path, "params.json")
    try:
        if storage.stat(path) is None:
            return None
        data = json.loads(storage.read_bytes(path, PARAMS_LIMIT))
    except (StorageError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _bundles(
    storage, experiment: Experiment, trial: Trial
) -> tuple[list[dict[str, float]], str, str]:
    """(bundles, strategy, where they came from) of the trial's placement group."""
    from ray_doctor.checkpoint._pickle import Obj, PickleError, analyse
    from ray_doctor.scan._state import StateError, read_state_elements, trial_json
    from ray_doctor.storage import StorageError

    if experiment.state_file is None:
        return DEFAULT_BUNDLES, "PACK", "default (no experiment state)"
    try:
        state_path = storage.join(experiment.path, experiment.state_file)
        _, elements = read_state_elements(storage, state_path)
        for element in elements:
            state = trial_json(element)
            if state.get("trial_id") != trial.trial_id:
                continue
            blob = state.get("placement_group_factory")
            if not isinstance(blob, str):
                break
            root = analyse(bytes.fromhex(blob)).root
            fields = root.state if isinstance(root, Obj) and isinstance(root.state, dict) else {}
            bundles = fields.get("_bundles")
            if isinstance(bundles, list) and bundles and all(isinstance(b, dict) for b in bundles):
                clean = [
                    {str(k): float(v) for k, v in b.items() if isinstance(v, (int, float))}
                    for b in bundles
                ]
                strategy = (
                    fields.get("_strategy") if isinstance(fields.get("_strategy"), str) else "PACK"
                )
                return (
                    clean,
                    strategy,
                    "experiment state (placement group, read without unpickling)",
                )
            break
    except (StateError, StorageError, PickleError, ValueError):
        pass
    return DEFAULT_BUNDLES, "PACK", "default (not in the experiment state)"


def _headline(findings: list[Finding], trial: Trial) -> Finding | None:
    own = [f for f in findings if f.trial_id == trial.trial_id]
    return own[0] if own else None  # run_rules sorts by severity, then the registry's order


def _summary(finding: Finding | None, trial: Trial | None) -> dict[str, Any] | None:
    if finding is None:
        return None
    failure = trial.failures[-1] if trial is not None and trial.failures else None
    return {
        "rule": finding.rule,
        "title": finding.title,
        "message": finding.message,
        "fix": finding.fix,
        "exc_type": failure.exc_type if failure else None,
        "iterations": trial.iterations if trial is not None else None,
    }


def plan(
    experiment_dir: str, trial_key: str, entrypoint: str, iterations: int | None, logs: list[str]
) -> RelaunchPlan:
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import ScanFailure, scan
    from ray_doctor.storage import StorageError, open_storage

    if ":" not in entrypoint or not entrypoint.rpartition(":")[2]:
        raise RelaunchError(
            f"--entrypoint {entrypoint!r}: expected module:function or path/file.py:function"
        )
    try:
        result = scan(experiment_dir, logs)
    except ScanFailure as exc:
        raise RelaunchError(str(exc)) from None
    if result.layout is None:
        raise RelaunchError(f"{experiment_dir}: no Ray experiment there")
    experiment, trial = _find_trial(result, trial_key)
    if experiment.layout not in RELAUNCH_LAYOUTS:
        raise RelaunchError(
            f"--from re-runs Tune trials; {experiment.path} is a {experiment.layout.value} run, "
            "whose train_loop_per_worker needs its ScalingConfig (not supported yet)"
        )
    try:
        storage, _ = open_storage(experiment.path)
    except StorageError as exc:
        raise RelaunchError(f"cannot read {exc.path}: {exc.reason}") from None
    config = _params(storage, trial) or trial.config
    pickled = _pickled_values(config)
    if pickled:
        raise RelaunchError(
            f"the config of {trial.trial_id} holds values Ray could only pickle ({', '.join(pickled)}); "
            "ray-doctor never unpickles, so build them in your entrypoint instead"
        )
    bundles, strategy, source = _bundles(storage, experiment, trial)
    original = _headline(run_rules(result), trial)
    reached = trial.iterations or 0
    failed = trial.status == TrialStatus.ERROR or bool(trial.failures)
    return RelaunchPlan(
        experiment=experiment.path,
        experiment_name=experiment.name,
        trial_id=trial.trial_id,
        entrypoint=entrypoint,
        iterations=iterations or max(1, reached + 1 if failed else reached),
        config=config,
        resources=bundles,
        strategy=strategy,
        resources_from=source,
        original=_summary(original, trial),
        original_iterations=reached,
    )


# ---------------------------------------------------------------------------------- verdict


def _rerun_findings(path: str, logs: list[str]) -> tuple[Trial | None, list[Finding], str | None]:
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import ScanFailure, scan

    try:
        result = scan(path, logs)
    except ScanFailure as exc:
        return None, [], str(exc)
    trials = [t for e in result.experiments for t in e.trials]
    if not trials:
        return None, [], f"{path}: the re-run wrote no trial"
    return trials[0], run_rules(result), None


def _same_cause(original: dict[str, Any], now: Finding, trial: Trial) -> bool:
    if original["rule"] != now.rule:
        return False
    exc_type = trial.failures[-1].exc_type if trial.failures else None
    return not (original.get("exc_type") and exc_type) or original["exc_type"] == exc_type


def _peaks_text(peaks: dict[str, Any] | None) -> str:
    if not peaks:
        return ""
    text = f" Peak host RSS {gib(peaks.get('host_rss_bytes'))}"
    if peaks.get("device_bytes"):
        text += f", peak device memory {gib(peaks['device_bytes'])}"
    return text + f" (pid {peaks.get('pid')} on {peaks.get('ip') or peaks.get('hostname')})."


def verdict(
    plan: RelaunchPlan, facts: dict[str, Any], logs: list[str]
) -> tuple[StageResult, dict[str, Any]]:
    """The relaunch stage and the report's `relaunch` object."""
    report: dict[str, Any] = {
        "experiment": plan.experiment,
        "trial_id": plan.trial_id,
        "entrypoint": plan.entrypoint,
        "iterations": plan.iterations,
        "config": plan.config,
        "resources": plan.resources,
        "resources_from": plan.resources_from,
        "original": plan.original,
        "outcome": "not-run",
        "peak_host_rss_bytes": (facts.get("peaks") or {}).get("host_rss_bytes"),
        "peak_device_bytes": (facts.get("peaks") or {}).get("device_bytes"),
        "seconds": facts.get("seconds"),
    }
    duration = facts.get("seconds") or 0.0
    if facts.get("import_error"):
        text = facts["import_error"]
        message = f"Could not import the entrypoint {plan.entrypoint}: {text.splitlines()[-1]}"
        return StageResult(
            "relaunch",
            StageStatus.ERROR,
            message=message,
            evidence=[Evidence(plan.entrypoint, None, text.splitlines()[-1])],
            details=report,
        ), report
    if not facts.get("finished"):
        message = (
            f"The re-run did not finish within the time left ({duration:.0f} s): raise --timeout."
        )
        return StageResult(
            "relaunch", StageStatus.ERROR, duration_s=duration, message=message, details=report
        ), report
    trial, findings, scan_error = _rerun_findings(facts["experiment_path"], logs)
    report["path"] = facts["experiment_path"]
    report["iterations_reached"] = trial.iterations if trial else facts.get("iterations")
    if trial is None:
        message = f"ray-doctor could not read the re-run's experiment: {scan_error}"
        return StageResult(
            "relaunch", StageStatus.ERROR, duration_s=duration, message=message, details=report
        ), report
    now = (
        next((f for f in findings if f.severity.rank >= 3), None) if facts.get("errored") else None
    )
    stage_finding = _compare(plan, trial, now, findings, facts)
    report["outcome"] = {
        "failure-reproduced": "reproduced",
        "failure-changed": "different",
        "failure-not-reproduced": "not-reproduced",
    }.get(stage_finding.rule if stage_finding else "", "not-reproduced")
    report["rerun_findings"] = [{"rule": f.rule, "message": f.message} for f in findings]
    if stage_finding is None:
        message = f"Trial {plan.trial_id}'s config ran {trial.iterations} iterations without failing.{_peaks_text(facts.get('peaks'))}"
        return StageResult(
            "relaunch", StageStatus.PASS, duration_s=duration, message=message, details=report
        ), report
    status = StageStatus.FAIL if stage_finding.severity.rank >= 3 else StageStatus.PASS
    return StageResult(
        "relaunch",
        status,
        duration_s=duration,
        message=stage_finding.message,
        evidence=stage_finding.evidence,
        details=report,
        findings=[stage_finding],
    ), report


def _cause(now: Finding, trial: Trial) -> str:
    """What the re-run died of, in the words of its own failure: `ValueError: …` (rule)."""
    if trial.failures and trial.failures[-1].exc_type:
        return f"{trial.failures[-1].summary} ({now.rule})"
    return f"{now.message} ({now.rule})"


def _compare(
    plan: RelaunchPlan,
    trial: Trial,
    now: Finding | None,
    findings: list[Finding],
    facts: dict[str, Any],
) -> Finding | None:
    original = plan.original
    peaks = _peaks_text(facts.get("peaks"))
    reached, before = trial.iterations or 0, plan.original_iterations
    when = f"after {reached} reported iteration{'s' if reached != 1 else ''}"
    if before is not None:
        when += ", as the original" if before == reached else f" (the original: {before})"
    evidence = list(now.evidence[:3]) if now else []
    related = [Related(f.rule, f.title, f.message) for f in findings if f is not now][:5]
    if original:
        evidence.insert(
            0,
            Evidence(plan.experiment, None, f"original: {original['rule']}: {original['message']}"),
        )

    def make(rule_id: str, message: str, fix: str) -> Finding:
        made = finding(
            rule_id, message, fix, evidence, experiment=plan.experiment_name, trial_id=plan.trial_id
        )
        made.related = ([Related(now.rule, now.title, now.message)] if now else []) + related
        return made

    if now is not None and original and _same_cause(original, now, trial):
        message = f"Trial {plan.trial_id} fails again with its own config, {when}: {_cause(now, trial)}.{peaks}"
        fix = f"The failure is deterministic for this config; retrying will not help. {original.get('fix') or now.fix}"
        return make("failure-reproduced", message, fix)
    if now is not None:
        was = (
            f"{original['rule']} ({original['message'].rstrip('.')})"
            if original
            else "no error finding"
        )
        message = f"Trial {plan.trial_id} fails {when}, with {_cause(now, trial)}; the original had {was}.{peaks}"
        return make("failure-changed", message, f"Fix this failure first: {now.fix}")
    if facts.get("errored"):
        error = (facts.get("error") or "").strip().splitlines()
        message = (
            f"Trial {plan.trial_id} fails again {when}, with an error ray-doctor's rules do not "
            f"name: {error[-1] if error else 'unknown'}.{peaks}"
        )
        return make("failure-changed", message, "Read the error text; it is reported as it stands.")
    if original is None:
        return None
    short = before is not None and reached <= before
    message = (
        f"Trial {plan.trial_id} ran {reached} iterations with its own config without failing; "
        f"the original failed with {original['rule']} after {before} reported iterations."
        + (
            " The re-run stopped before the step where the original failed: raise --iterations."
            if short
            else " The failure looks transient or specific to the original's surroundings."
        )
        + peaks
    )
    fix = (
        "Resume the original (`Tuner.restore(path, trainable, resume_errored=True)`) and let "
        "`FailureConfig(max_failures=N)` retry transient failures; if it failed on one node only, "
        "run `ray-doctor smoke --address` against that cluster."
    )
    return make("failure-not-reproduced", message, fix)
