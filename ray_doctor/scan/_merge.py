"""Attach what logs say to the experiments and trials it is about."""

from __future__ import annotations

from dataclasses import replace

from ray_doctor.model import (
    Experiment,
    Failure,
    Layout,
    LogEvent,
    ScanResult,
    Trial,
    TrialStatus,
)
from ray_doctor.scan._logs import LogResult
from ray_doctor.scan._trial import trial_id_from_name

# Driver-side exceptions that only restate that trials failed; the trials carry the cause.
CONSEQUENCES = (
    ("TuneError", "Trials did not complete"),
    ("TrainingFailedError", "The Ray Train run failed"),
)


def log_experiment(path: str, name: str, found: LogResult) -> Experiment:
    experiment = Experiment(path=path, name=name, layout=Layout.LOG)
    for failure, _ in found.failures:
        _attach_failure(experiment, None, failure)
    experiment.events += found.events
    experiment.logs = list(found.files)
    experiment.errors = list(found.errors)
    return experiment


def _key(failure: Failure) -> tuple[str | None, str]:
    first = failure.message.strip().splitlines()[0] if failure.message.strip() else ""
    return failure.exc_type, first


def _find_trial(experiments: list[Experiment], key: str | None) -> tuple[Experiment, Trial] | None:
    if not key:
        return None
    candidates = {key, trial_id_from_name(key)}
    for experiment in experiments:
        for trial in experiment.trials:
            if trial.trial_id in candidates or trial.name in candidates:
                return experiment, trial
            if trial.name.startswith(key):  # the driver prints `<trainable>_<trial_id>`
                return experiment, trial
    return None


def _is_consequence(failure: Failure) -> bool:
    names = {failure.exc_type, failure.wrapper}
    return any(kind in names and marker in failure.text for kind, marker in CONSEQUENCES)


def _same(failure: Failure, experiment: Experiment, trial: Trial | None) -> Failure | None:
    pool = list(trial.failures) if trial else []
    if trial is None:
        pool += [f for t in experiment.trials for f in t.failures] + experiment.failures
    key = _key(failure)
    return next((f for f in pool if _key(f) == key), None)


def _attach_failure(experiment: Experiment, trial: Trial | None, failure: Failure) -> None:
    known = _same(failure, experiment, trial)
    if known is not None and len(failure.ranks) > len(known.ranks):
        # A Train V2 WorkerGroupError names more ranks than one rank's own traceback: its
        # text holds what the other ranks died of. It stands in for the copy seen first.
        _replace_failure(experiment, trial, known, failure)
        known, failure = failure, known
    if known is not None:
        # The same error seen twice (error.txt and the driver log, a worker and the driver):
        # keep one, with what either copy knew.
        known.wrapper = known.wrapper or failure.wrapper
        known.ranks = known.ranks or failure.ranks
        known.user_frame = known.user_frame or failure.user_frame
        return
    if _is_consequence(failure) and any(t.failures for t in experiment.trials):
        evidence = failure.exc_line or failure.source
        if evidence is not None:
            experiment.events.append(LogEvent("run-failed", evidence))
        return
    if trial is None and experiment.layout == Layout.TRAIN_V2 and len(experiment.trials) == 1:
        trial = experiment.trials[0]
    if trial is None:
        experiment.failures.append(failure)
        return
    trial.failures.append(failure)
    if trial.status == TrialStatus.UNKNOWN and experiment.layout == Layout.TRAIN_V2:
        trial.status = TrialStatus.ERROR


def _replace_failure(
    experiment: Experiment, trial: Trial | None, old: Failure, new: Failure
) -> None:
    for failures in (
        *(t.failures for t in ([trial] if trial else experiment.trials)),
        experiment.failures,
    ):
        for index, failure in enumerate(failures):
            if failure is old:
                failures[index] = new
                return


def _trials_by_pid(experiments: list[Experiment]) -> dict[int, tuple[Experiment, Trial]]:
    """Map worker pids (from each trial's last reported row) to trials."""
    out: dict[int, tuple[Experiment, Trial]] = {}
    for experiment in experiments:
        for trial in experiment.trials:
            pid = trial.last_result.get("pid")
            if isinstance(pid, int) and not isinstance(pid, bool):
                out[pid] = (experiment, trial)
    return out


def merge_logs(result: ScanResult, found: LogResult) -> None:
    experiments = result.experiments
    if not experiments:
        experiments.append(log_experiment(", ".join(found.files) or "logs", "logs", found))
        result.layout = result.layout or Layout.LOG
        return
    single = experiments[0] if len(experiments) == 1 else None
    orphans: Experiment | None = None
    for failure, key in found.failures:
        located = _find_trial(experiments, key)
        if located:
            _attach_failure(located[0], located[1], failure)
        elif single is not None:
            _attach_failure(single, None, failure)
        else:
            if orphans is None:
                orphans = log_experiment("logs", "logs", LogResult())
            orphans.failures.append(failure)
    by_pid = _trials_by_pid(experiments)
    for event in found.events:
        if event.trial is None and event.pid in by_pid:
            event = replace(event, trial=by_pid[event.pid][1].trial_id)
        located = _find_trial(experiments, event.trial)
        owner = located[0] if located else single
        if owner is None:
            if orphans is None:
                orphans = log_experiment("logs", "logs", LogResult())
            owner = orphans
        owner.events.append(event)
    owner = single or orphans or experiments[0]
    owner.logs.extend(found.files)
    result.errors.extend(found.errors)
    if orphans is not None:
        experiments.append(orphans)
