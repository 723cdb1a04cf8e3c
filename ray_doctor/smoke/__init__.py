"""`ray-doctor smoke`: real Ray Tune and Ray Train runs that confirm or refute a diagnosis.

The CLI process never imports Ray: it prepares the options, runs the stage runner
(`_runner`, a child process that does) under `_process`'s time bound, and assembles a
`SmokeResult` from the events the runner wrote. The same code runs the CPU path CI tests and
the GPU path: `--gpus N` switches the device (cuda) and the collective backend (nccl).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ray_doctor.model import Evidence
from ray_doctor.smoke._compat import unstartable_interpreter
from ray_doctor.smoke._model import (
    RelaunchPlan,
    SmokeOptions,
    SmokeResult,
    StageResult,
    StageStatus,
)
from ray_doctor.smoke._process import RunnerOutcome, interrupts_deferred, run_runner
from ray_doctor.smoke._relaunch import RelaunchError, plan, verdict
from ray_doctor.smoke.stages import default_stages, registry, titles
from ray_doctor.smoke.stages.cluster import token_available, token_mode_warning

# Ray's unix sockets live under its temp dir and must stay under ~107 bytes: a short dir of
# its own under /tmp (Ray's own default place), whatever TMPDIR says.
RAY_TEMP_PARENT = "/tmp"


class SmokeFailure(Exception):
    """Smoke cannot start: bad arguments, an experiment it cannot plan from (exit 2)."""


def validate(options: SmokeOptions) -> None:
    if options.gpus < 0 or (options.workers is not None and options.workers < 1):
        raise SmokeFailure("--gpus must be 0 or more and --workers 1 or more")
    if options.cpus_per_worker <= 0:
        raise SmokeFailure("--cpus-per-worker must be more than 0")
    if not 0 < options.memory_fraction <= 1:
        raise SmokeFailure("--memory-fraction must be in (0, 1]")
    if options.gpus and options.gpus % options.worker_count:
        raise SmokeFailure(
            f"--gpus {options.gpus} --workers {options.worker_count}: each worker needs whole "
            "GPUs (NCCL refuses two ranks on one GPU); use a --workers that divides --gpus"
        )
    unknown = set(options.stages) - set(titles())
    if unknown:
        raise SmokeFailure(f"unknown stage {sorted(unknown)[0]!r}; stages: {', '.join(titles())}")
    if "relaunch" in options.stages and options.relaunch is None:
        raise SmokeFailure("the relaunch stage needs --from, --trial and --entrypoint")
    why = None if options.address else unstartable_interpreter()
    if why:
        raise SmokeFailure(f"smoke cannot start a local Ray here: {why}")


def plan_relaunch(
    experiment_dir: str, trial: str, entrypoint: str, iterations: int | None, logs: list[str]
) -> RelaunchPlan:
    try:
        return plan(experiment_dir, trial, entrypoint, iterations, logs)
    except RelaunchError as exc:
        raise SmokeFailure(str(exc)) from None


def run_smoke(
    options: SmokeOptions,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    logs: list[str] | None = None,
) -> SmokeResult:
    """Run the selected stages; always returns a result (interrupted or not) and cleans up."""
    validate(options)
    started = time.monotonic()
    options.token = secrets.token_hex(4)
    options.work_dir = tempfile.mkdtemp(prefix="ray-doctor-smoke-")
    if not options.address:
        options.ray_temp_dir = tempfile.mkdtemp(prefix="rdsmoke-", dir=RAY_TEMP_PARENT)
    outcome: RunnerOutcome | None = None
    token_mode = False
    try:
        outcome = run_runner(options, on_event)
        token_mode = _needs_token_mode(options, outcome) and outcome.ended != "interrupted"
        if token_mode:
            options.timeout_s = max(1.0, options.timeout_s - (time.monotonic() - started))
            outcome = run_runner(options, on_event, {"RAY_AUTH_MODE": "token"})
    finally:
        # From here on a Ctrl-C is noted, not raised: the report and the clean-up still
        # happen, and the run ends as interrupted. The report comes first: the relaunch
        # verdict reads the experiment the re-run wrote into the work dir.
        with interrupts_deferred() as deferred:
            try:
                if outcome is not None:
                    result = _report(options, outcome, logs or [], token_mode)
            finally:
                kept = _clean_up(options)
    if deferred.seen:
        _mark_interrupted(result)
    if kept:
        result.environment.setdefault("kept", kept)
    result.duration_s = time.monotonic() - started
    return result


def _report(
    options: SmokeOptions, outcome: RunnerOutcome, logs: list[str], token_mode: bool
) -> SmokeResult:
    result = assemble(options, outcome, logs)
    cluster = result.stage("cluster")
    if token_mode and cluster and cluster.status == StageStatus.PASS:
        cluster.findings.insert(0, token_mode_warning(options.address or ""))
    return result


def _mark_interrupted(result: SmokeResult) -> None:
    """A Ctrl-C that came while the report was built or the run cleaned up."""
    if result.ended != "interrupted":
        result.ended = "interrupted"
        result.errors.append(("smoke", "the run was interrupted"))


def _needs_token_mode(options: SmokeOptions, outcome: RunnerOutcome) -> bool:
    """Ray 2.60 drivers send the cluster's auth token only with RAY_AUTH_MODE=token, even
    when ~/.ray/auth_token holds it; a join refused for that is retried once in token mode
    (in a fresh runner: Ray reads the mode when it starts)."""
    if "RAY_AUTH_MODE" in os.environ or not token_available():
        return False
    cluster = next(
        (e for e in outcome.events if e["type"] == "stage" and e["name"] == "cluster"), None
    )
    return bool(cluster and (cluster.get("details") or {}).get("auth") == "token-required")


def _ended_message(options: SmokeOptions, outcome: RunnerOutcome) -> str:
    """How the run ended, as a verb phrase: 'This stage …' / 'the run …'."""
    if outcome.ended == "timeout":
        return f"did not finish within --timeout {options.timeout_s:g} s"
    if outcome.ended == "interrupted":
        return "was interrupted"
    tail = outcome.log_tail(3).strip().splitlines()
    return "stopped when the stage runner exited" + (
        f": {tail[-1]}" if tail else f" ({outcome.returncode})"
    )


def assemble(options: SmokeOptions, outcome: RunnerOutcome, logs: list[str]) -> SmokeResult:
    result = SmokeResult(target=options.address or "local", ended=outcome.ended)
    by_name: dict[str, StageResult] = {}
    running: set[str] = set()
    facts = None
    for event in outcome.events:
        kind = event["type"]
        if kind == "stage":
            stage = StageResult.from_json(event)
            by_name[stage.name] = stage
            running.discard(stage.name)
        elif kind == "start":
            running.add(event["stage"])
            declared = registry().get(event["stage"])
            running.update(declared.reports if declared else ())  # one run serves them all
        elif kind == "ray":
            result.ray_version = event.get("version")
        elif kind == "environment":
            result.environment.update(event["environment"])
        elif kind == "api":  # which Ray API path the stages took (smoke/_compat.py)
            result.environment["ray_api"] = event["api"]
        elif kind == "relaunch":
            facts = event["facts"]
    if facts is not None and options.relaunch is not None:
        relaunch_logs = logs + _runner_logs(options, outcome)
        by_name["relaunch"], result.relaunch = verdict(options.relaunch, facts, relaunch_logs)
        running.discard("relaunch")
    cluster = by_name.get("cluster")
    if cluster is not None and any(f.rule == "cluster-unreachable" for f in cluster.findings):
        result.errors.append((options.address or "local", cluster.message))
    if outcome.ended != "done":
        result.errors.append(("smoke", f"the run {_ended_message(options, outcome)}"))
    if cluster is not None and outcome.leftovers:
        cluster.details["cleanup_killed"] = outcome.leftovers  # nothing is left running
    for name in options.stages:
        if name in by_name:
            continue
        if name in running:
            text = _ended_message(options, outcome)
            by_name[name] = StageResult(
                name,
                StageStatus.ERROR,
                message=f"This stage {text}.",
                evidence=_log_evidence(outcome),
            )
        elif cluster is None or cluster.status != StageStatus.PASS:
            by_name[name] = StageResult(
                name, StageStatus.SKIP, message="Skipped: the cluster stage did not pass."
            )
        else:
            by_name[name] = StageResult(
                name,
                StageStatus.SKIP,
                message=f"Not reached: the run {_ended_message(options, outcome)}.",
            )
    result.stages = [by_name[n] for n in registry() if n in by_name and n in options.stages]
    return result


def _log_evidence(outcome: RunnerOutcome) -> list[Evidence]:
    tail = [line for line in outcome.log_tail(5).splitlines() if line.strip()]
    return [Evidence("smoke runner log", None, line) for line in tail[-3:]]


def _runner_logs(options: SmokeOptions, outcome: RunnerOutcome) -> list[str]:
    """The driver's output and, for a Ray smoke started, its session logs: what inspect
    needs beside the experiment dir to see kills and OOMs."""
    found = [str(outcome.log)] if outcome.log and outcome.log.exists() else []
    if options.ray_temp_dir:
        session = os.path.join(options.ray_temp_dir, "session_latest", "logs")
        if os.path.isdir(session):
            found.append(session)
    return found


def _clean_up(options: SmokeOptions) -> dict[str, str]:
    """Remove what this run created (its temp dirs, its experiments in the user's storage);
    with --keep, leave it and say where it is."""
    places = {"work_dir": options.work_dir}
    if options.ray_temp_dir:
        places["ray_temp_dir"] = options.ray_temp_dir
    if options.keep:
        if options.storage_path:
            places["storage"] = options.storage_path
        return places
    for path in places.values():
        shutil.rmtree(path, ignore_errors=True)
    if options.storage_path:
        _remove_own_experiments(options, options.storage_path)
    # Ray 2.7-2.9 stage every experiment in a local results dir (~/ray_results unless
    # RAY_AIR_LOCAL_CACHE_DIR or TUNE_RESULT_DIR say otherwise) and sync it to the
    # storage_path: the staged copy of this run's experiments would stay behind there.
    _remove_own_experiments(options, _local_results_dir())
    return {}


def _local_results_dir() -> str:
    for name in ("RAY_AIR_LOCAL_CACHE_DIR", "TUNE_RESULT_DIR"):
        if os.environ.get(name):
            return os.environ[name]
    return os.path.expanduser("~/ray_results")


def _remove_own_experiments(options: SmokeOptions, storage: str) -> None:
    """Delete the dirs named after this run's token under `storage` (a path or URI)."""
    import pyarrow.fs

    prefix = f"ray-doctor-smoke-{options.token}"
    try:
        if "://" in storage:
            fs, base = pyarrow.fs.FileSystem.from_uri(storage)
        else:
            fs, base = pyarrow.fs.LocalFileSystem(), os.path.abspath(storage)
        for info in fs.get_file_info(pyarrow.fs.FileSelector(base, allow_not_found=True)):
            if info.base_name.startswith(prefix) and info.type == pyarrow.fs.FileType.Directory:
                fs.delete_dir(info.path)
    except Exception:  # best effort: never let clean-up hide the report
        pass


__all__ = [
    "SmokeFailure",
    "SmokeOptions",
    "SmokeResult",
    "default_stages",
    "plan_relaunch",
    "run_smoke",
]
