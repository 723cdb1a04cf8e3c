"""Layout readers: turn whatever a Ray run left behind into one `ScanResult`.

`scan()` works out what the target is (a storage_path, a Tune / Train V1 experiment, a Train V2
run, a trial dir, a log file, stdin), runs the matching reader, then merges the logs given
with `--logs` into the experiments. It reads only; it never raises for bad data, it records
a `ScanError` instead. It raises `ScanFailure` only when the target itself cannot be opened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TextIO

from ray_doctor.model import Experiment, Layout, ScanError, ScanResult
from ray_doctor.scan._logs import (
    LogResult,
    is_session_logs_dir,
    parse_text_log,
    read_logs,
    read_session_logs,
)
from ray_doctor.scan._merge import log_experiment, merge_logs
from ray_doctor.scan._train_v2 import SNAPSHOT, is_train_v2_run, read_train_v2_run
from ray_doctor.scan._trial import complete_from_dir, looks_like_trial_dir, read_trial_dir
from ray_doctor.scan._tune import STATE_GLOB, is_tune_experiment, read_tune_experiment
from ray_doctor.storage import Entry, Storage, StorageError, open_storage

EXPERIMENT_MARKERS = {".validate_storage_marker", "tuner.pkl", "trainer.pkl", SNAPSHOT}
MAX_SEARCH_DEPTH = 2  # how far below the target to look for experiments
MAX_SEARCH_DIRS = 5000  # dirs listed while looking, at most

Progress = Callable[[str, int, int], None]


class ScanFailure(Exception):
    """The target cannot be read at all (missing, unreadable storage): inspect exits 2."""


def scan(
    target: str,
    logs: Sequence[str] = (),
    stdin: TextIO | None = None,
    workers: int = 8,
    progress: Progress | None = None,
) -> ScanResult:
    if target == "-":
        if stdin is None:
            raise ScanFailure("'-' given but no standard input")
        result = ScanResult(target="-", layout=Layout.LOG)
        found = parse_text_log(stdin, "<stdin>")
        result.experiments.append(log_experiment("<stdin>", "stdin", found))
    else:
        result = _scan_path(target, workers, progress)
    extra = LogResult()
    for path in logs:
        extra.extend(_read_log_target(path))
    if extra.files or extra.errors:
        merge_logs(result, extra)
    return result


def _open(target: str) -> tuple[Storage, str, Entry]:
    try:
        storage, path = open_storage(target)
        entry = storage.stat(path)
    except StorageError as exc:
        raise ScanFailure(f"cannot read {exc.path}: {exc.reason}") from None
    if entry is None:
        raise ScanFailure(f"{storage.display(path)}: {storage.why_missing(path)}")
    return storage, path, entry


def _read_log_target(target: str) -> LogResult:
    try:
        storage, path, _ = _open(target)
    except ScanFailure as exc:
        return LogResult(errors=[ScanError(target, str(exc).split(": ", 1)[-1])])
    return read_logs(storage, path)


def _scan_path(target: str, workers: int, progress: Progress | None) -> ScanResult:
    storage, path, entry = _open(target)
    display = storage.display(path)
    result = ScanResult(target=display, layout=None)
    if not entry.is_dir:
        return _scan_file(storage, path, entry, result, workers, progress)
    try:
        entries = storage.list_dir(path)
    except StorageError as exc:
        raise ScanFailure(f"cannot list {exc.path}: {exc.reason}") from None

    experiment = _read_experiment(storage, path, entries, workers, progress)
    if experiment is not None:
        result.layout = experiment.layout
        result.experiments.append(experiment)
        return result
    if looks_like_trial_dir(entries):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        trial, errors = read_trial_dir(storage, path, name, entries)
        assert trial is not None  # looks_like_trial_dir said so
        complete_from_dir(trial)
        experiment = Experiment(path=display, name=name, layout=Layout.TRIAL, trials=[trial])
        experiment.errors = errors
        experiment.start_time, experiment.end_time = trial.start_time, trial.last_result_time
        result.layout = Layout.TRIAL
        result.experiments.append(experiment)
        return result
    if is_session_logs_dir(entries):
        found = read_session_logs(storage, path)
        result.layout = Layout.LOG
        result.experiments.append(log_experiment(display, "session logs", found))
        return result
    _scan_storage_path(storage, path, entries, result, workers, progress)
    return result


def _scan_file(
    storage: Storage,
    path: str,
    entry: Entry,
    result: ScanResult,
    workers: int,
    progress: Progress | None,
) -> ScanResult:
    parent = path.rstrip("/").rsplit("/", 1)[0]
    # A state file or snapshot stands for the experiment dir that holds it.
    if _matches_state(entry.name) or entry.name == SNAPSHOT:
        return _scan_path(storage.display(parent), workers, progress)
    if not entry.is_file:
        raise ScanFailure(f"{storage.display(path)}: not a regular file")
    found = read_logs(storage, path)
    result.layout = Layout.LOG
    result.experiments.append(log_experiment(storage.display(path), entry.name, found))
    return result


def _matches_state(name: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(name, STATE_GLOB)


def _read_experiment(
    storage: Storage,
    path: str,
    entries: list[Entry],
    workers: int,
    progress: Progress | None,
) -> Experiment | None:
    name = path.rstrip("/").rsplit("/", 1)[-1]

    def tick(done: int, total: int) -> None:
        if progress:
            progress(name, done, total)

    if is_tune_experiment(entries):
        return read_tune_experiment(storage, path, entries, workers, tick)
    if is_train_v2_run(entries):
        return read_train_v2_run(storage, path, entries)
    names = {e.name for e in entries}
    if names & EXPERIMENT_MARKERS and not looks_like_trial_dir(entries):
        # Storage was set up but no state was synced (e.g. the driver died early).
        experiment = read_tune_experiment(storage, path, entries, workers, tick)
        if experiment.trials or "tuner.pkl" in names or "trainer.pkl" in names:
            experiment.errors.append(
                ScanError(experiment.path, "no experiment_state file: the driver never synced one")
            )
            return experiment
        if ".validate_storage_marker" in names:
            # A V2 run (or V1) that stopped before its first checkpoint.
            return read_train_v2_run(storage, path, entries)
    return None


def _scan_storage_path(
    storage: Storage,
    path: str,
    entries: list[Entry],
    result: ScanResult,
    workers: int,
    progress: Progress | None,
) -> None:
    """Look below the target for experiments, breadth first, a bounded number of levels."""
    frontier = [e for e in entries if e.is_dir]
    listed = 0
    for _depth in range(MAX_SEARCH_DEPTH):
        next_frontier: list[Entry] = []
        for child in frontier:
            if listed >= MAX_SEARCH_DIRS:
                result.errors.append(
                    ScanError(result.target, f"stopped looking after {MAX_SEARCH_DIRS} dirs")
                )
                break
            listed += 1
            try:
                child_entries = storage.list_dir(child.path)
            except StorageError as exc:
                result.errors.append(ScanError(exc.path, exc.reason))
                continue
            experiment = _read_experiment(storage, child.path, child_entries, workers, progress)
            if experiment is not None:
                result.experiments.append(experiment)
            elif not looks_like_trial_dir(child_entries):
                next_frontier += [e for e in child_entries if e.is_dir]
        if result.experiments:
            break
        frontier = next_frontier
    if result.experiments:
        result.layout = Layout.STORAGE


__all__ = ["ScanFailure", "scan"]
