"""Layout readers: turn whatever a Ray run left behind into one `ScanResult`.

`scan()` works out what the target is (a storage_path, a Tune / Train V1 experiment, a Train V2
run, a trial dir, a log file, stdin), runs the matching reader, then merges the logs given
with `--logs` into the experiments. It reads only; it never raises for bad data, it records
a `ScanError` instead. It raises `ScanFailure` only when the target itself cannot be opened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TextIO

from ray_doctor.model import CollectiveEvidence, Experiment, Layout, ScanError, ScanResult
from ray_doctor.scan import _flight_recorder as flight_recorder
from ray_doctor.scan._cache import ScanCache
from ray_doctor.scan._logs import (
    LogResult,
    is_session_logs_dir,
    parse_text_log,
    read_logs,
    read_session_logs,
    read_text_stream,
    session_logs_within,
)
from ray_doctor.scan._merge import log_experiment, merge_logs
from ray_doctor.scan._train_v2 import SNAPSHOT, is_train_v2_run, read_train_v2_run
from ray_doctor.scan._trial import complete_from_dir, looks_like_trial_dir, read_trial_dir
from ray_doctor.scan._tune import (
    STATE_GLOB,
    ScanInterrupted,
    is_tune_experiment,
    read_tune_experiment,
)
from ray_doctor.storage import Entry, Storage, StorageError, open_storage

EXPERIMENT_MARKERS = {".validate_storage_marker", "tuner.pkl", "trainer.pkl", SNAPSHOT}
MAX_SEARCH_DEPTH = 2  # how far below the target to look for experiments
MAX_SEARCH_DIRS = 5000  # dirs listed while looking, at most

Progress = Callable[[str, int, int], None]


class ScanFailure(Exception):
    """The target cannot be read at all (missing, unreadable storage): inspect exits 2."""


@dataclass(frozen=True)
class _How:
    """How to read: parallel readers, who hears of progress, what an earlier pass kept."""

    workers: int = 8
    progress: Progress | None = None
    cache: ScanCache | None = None


def scan(
    target: str,
    logs: Sequence[str] = (),
    stdin: TextIO | None = None,
    workers: int = 8,
    progress: Progress | None = None,
    cache: ScanCache | None = None,
) -> ScanResult:
    """`cache`: pass the same one to each scan of a changing target (`--watch`) to re-read
    only the files that changed since the previous scan."""
    if cache is not None:
        cache.start_pass()
    if target == "-":
        if stdin is None:
            raise ScanFailure("'-' given but no standard input")
        result = ScanResult(target="-", layout=Layout.LOG)
        raw = getattr(stdin, "buffer", None)  # a text stream without bytes (tests) as lines
        found = read_text_stream(raw, "<stdin>") if raw else parse_text_log(stdin, "<stdin>")
        result.experiments.append(log_experiment("<stdin>", "stdin", found))
    else:
        result = _scan_path(target, _How(workers, progress, cache))
    extra = LogResult()
    dumps = CollectiveEvidence()
    for done, path in enumerate(() if result.interrupted else logs):
        label = f"logs {path.rstrip('/').rsplit('/', 1)[-1]}"
        try:
            extra.extend(_read_log_target(path, partial(progress, label) if progress else None))
            _read_dumps_target(path, dumps, extra)
        except KeyboardInterrupt:
            result.interrupted = True
            left = ", ".join(logs[done:])
            result.errors.append(ScanError(path, f"interrupted: logs not read: {left}"))
            break
    if extra.files or extra.errors or dumps:
        merge_logs(result, extra)
    if dumps:
        flight_recorder.merge_evidence(result.experiments[0], dumps)
    flight_recorder.attach(result.experiments)
    return result


def _read_dumps_target(target: str, into: CollectiveEvidence, extra: LogResult) -> None:
    """Flight Recorder dumps and torchelastic error files given with --logs (a file, or a
    dir of them, or a logs dir that holds them)."""
    try:
        storage, path, entry = _open(target)
    except ScanFailure:
        return  # _read_log_target has reported it
    if not (entry.is_dir or entry.is_file):
        return  # a device or a pipe: _read_log_target has reported it too
    if entry.is_dir:
        found, errors = flight_recorder.read_evidence_dir(storage, path)
    else:
        found, errors = flight_recorder.read_evidence(storage, entry)
    into.dumps += found.dumps
    into.exits += found.exits
    extra.errors += errors


def _open(target: str) -> tuple[Storage, str, Entry]:
    try:
        storage, path = open_storage(target)
    except StorageError as exc:
        raise ScanFailure(f"cannot read {exc.path}: {exc.reason}") from None
    return storage, path, _stat_target(storage, path)


def _stat_target(storage: Storage, path: str) -> Entry:
    try:
        entry = storage.stat(path)
    except StorageError as exc:
        raise ScanFailure(f"cannot read {exc.path}: {exc.reason}") from None
    if entry is None:
        raise ScanFailure(f"{storage.display(path)}: {storage.why_missing(path)}")
    return entry


def _read_log_target(target: str, progress: Callable[[int, int], None] | None) -> LogResult:
    try:
        storage, path, _ = _open(target)
    except ScanFailure as exc:
        return LogResult(errors=[ScanError(target, str(exc).split(": ", 1)[-1])])
    return read_logs(storage, path, progress)


def scan_storage(
    storage: Storage, path: str, workers: int = 8, cache: ScanCache | None = None
) -> ScanResult:
    """`scan()` of a path in a storage the caller opened (a running run's own filesystem, or
    an `OverlayStorage` of what its driver staged over what it synced)."""
    if cache is not None:
        cache.start_pass()
    entry = _stat_target(storage, path)
    return _scan_opened(storage, path, entry, _How(workers, None, cache))


def _scan_path(target: str, how: _How) -> ScanResult:
    storage, path, entry = _open(target)
    return _scan_opened(storage, path, entry, how)


def _scan_opened(storage: Storage, path: str, entry: Entry, how: _How) -> ScanResult:
    display = storage.display(path)
    result = ScanResult(target=display, layout=None)
    if not entry.is_dir:
        return _scan_file(storage, path, entry, result, how)
    try:
        entries = storage.list_dir(path)
    except StorageError as exc:
        raise ScanFailure(f"cannot list {exc.path}: {exc.reason}") from None

    try:
        experiment = _read_experiment(storage, path, entries, how)
    except ScanInterrupted as stopped:
        experiment, result.interrupted = stopped.experiment, True
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
        return _session_logs_result(result, storage, path, how)
    if any(flight_recorder.could_be_evidence(e) for e in entries):
        evidence, errors = flight_recorder.read_evidence_dir(storage, path)
        if evidence or errors:
            return _evidence_result(result, display, "flight recorder dumps", evidence, errors)
    _scan_storage_path(storage, path, entries, result, how)
    if not result.experiments:
        # A session dir (`/tmp/ray/session_latest`) or Ray's temp dir (`/tmp/ray`): its logs.
        logs = session_logs_within(storage, path, entries)
        if logs is not None:
            return _session_logs_result(result, storage, logs, how)
    return result


def _session_logs_result(result: ScanResult, storage: Storage, path: str, how: _How) -> ScanResult:
    found = read_session_logs(storage, path, how.progress and partial(how.progress, "logs"))
    result.layout = Layout.LOG
    result.experiments.append(log_experiment(storage.display(path), "session logs", found))
    return result


def _evidence_result(
    result: ScanResult,
    display: str,
    name: str,
    evidence: CollectiveEvidence,
    errors: list[ScanError],
) -> ScanResult:
    """Dumps or error files (or files named like them that could not be read) on their own."""
    experiment = log_experiment(display, name, LogResult())
    experiment.collectives = evidence
    experiment.errors += errors
    result.layout = Layout.LOG
    result.experiments.append(experiment)
    return result


def _scan_file(
    storage: Storage,
    path: str,
    entry: Entry,
    result: ScanResult,
    how: _How,
) -> ScanResult:
    parent = path.rstrip("/").rsplit("/", 1)[0]
    # A state file or snapshot stands for the experiment dir that holds it.
    if _matches_state(entry.name) or entry.name == SNAPSHOT:
        return _scan_path(storage.display(parent), how)
    if not entry.is_file:
        raise ScanFailure(f"{storage.display(path)}: not a regular file")
    if flight_recorder.could_be_evidence(entry):
        evidence, errors = flight_recorder.read_evidence(storage, entry)
        if evidence or errors:
            return _evidence_result(result, storage.display(path), entry.name, evidence, errors)
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
    how: _How,
) -> Experiment | None:
    name = path.rstrip("/").rsplit("/", 1)[-1]

    def tick(done: int, total: int) -> None:
        if how.progress:
            how.progress(name, done, total)

    if is_tune_experiment(entries):
        return read_tune_experiment(storage, path, entries, how.workers, tick, how.cache)
    if is_train_v2_run(entries):
        return read_train_v2_run(storage, path, entries)
    names = {e.name for e in entries}
    if names & EXPERIMENT_MARKERS and not looks_like_trial_dir(entries):
        # Storage was set up but no state was synced (e.g. the driver died early).
        experiment = read_tune_experiment(storage, path, entries, how.workers, tick, how.cache)
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
    how: _How,
) -> None:
    """Find the experiments below the target, then read them one by one: a storage_path
    with hundreds of experiments shows how far it got, and memory holds one listing at a time."""
    found = _find_experiments(storage, entries, result)
    label = f"{len(found)} experiments"
    for done, (child, child_entries) in enumerate(found, start=1):
        try:
            experiment = _read_experiment(storage, child.path, child_entries, how)
        except (ScanInterrupted, KeyboardInterrupt) as stopped:
            result.interrupted = True
            if isinstance(stopped, ScanInterrupted):
                result.experiments.append(stopped.experiment)
            result.errors.append(
                ScanError(
                    result.target,
                    f"interrupted: {len(found) - done} of {len(found)} experiments not read",
                )
            )
            break
        if experiment is not None:
            result.experiments.append(experiment)
        if how.progress and len(found) > 1:
            how.progress(label, done, len(found))
    if result.experiments:
        result.layout = Layout.STORAGE


def experiments_below(storage: Storage, entries: list[Entry]) -> bool:
    """Whether a dir whose listing is `entries` holds experiments below it (a storage_path)."""
    return bool(_find_experiments(storage, entries, ScanResult(target="", layout=None)))


def _find_experiments(
    storage: Storage, entries: list[Entry], result: ScanResult
) -> list[tuple[Entry, list[Entry]]]:
    """Dirs below the target that hold an experiment, breadth first, a bounded number of
    levels; the shallowest level that has any wins."""
    frontier = [e for e in entries if e.is_dir]
    listed = 0
    found: list[tuple[Entry, list[Entry]]] = []
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
            if holds_experiment(child_entries):
                found.append((child, child_entries))
            elif not looks_like_trial_dir(child_entries):
                next_frontier += [e for e in child_entries if e.is_dir]
        if found:
            break
        frontier = next_frontier
    return found


def holds_experiment(entries: list[Entry]) -> bool:
    """What `_read_experiment` reads as an experiment (it returns one for each of these)."""
    if is_tune_experiment(entries) or is_train_v2_run(entries):
        return True
    names = {e.name for e in entries}
    return bool(names & EXPERIMENT_MARKERS) and not looks_like_trial_dir(entries)


__all__ = [
    "ScanCache",
    "ScanFailure",
    "experiments_below",
    "holds_experiment",
    "scan",
    "scan_storage",
]
