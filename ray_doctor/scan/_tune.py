"""Tune and Train V1 experiment dirs: experiment_state-*.json plus one dir per trial."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import NamedTuple

from ray_doctor._pool import can_fork, cpus, forked_pool
from ray_doctor.model import Experiment, Layout, ScanError, Trial
from ray_doctor.scan._cache import ScanCache
from ray_doctor.scan._cutoff import json_cut_off
from ray_doctor.scan._state import StateError, StateFile, TrialRecord, read_state
from ray_doctor.scan._trial import (
    apply_record,
    complete_from_dir,
    read_params,
    read_trial_dir,
    trial_from_record,
)
from ray_doctor.storage import Entry, LocalStorage, Storage, StorageError

STATE_GLOB = "experiment_state-*.json"
V1_MARKERS = {"trainer.pkl"}

Progress = Callable[[int, int], None]


def is_tune_experiment(entries: list[Entry]) -> bool:
    return any(_is_state_file(e) for e in entries)


def _is_state_file(entry: Entry) -> bool:
    # Not only regular files: a state file that is a FIFO or a dangling link is still the
    # experiment's, and reading it says why it cannot be read (never opened as a FIFO).
    return not entry.is_dir and fnmatch.fnmatch(entry.name, STATE_GLOB)


def _load_state(
    storage: Storage, state_entries: list[Entry], errors: list[ScanError]
) -> tuple[Entry | None, StateFile | None, list[TrialRecord]]:
    """The newest state file that parses; older ones stand in, with the failure recorded."""
    for entry in sorted(state_entries, key=lambda e: e.name, reverse=True):
        try:
            state, trials = read_state(storage, entry.path, entry.size)
            records = list(trials)
        except (StateError, StorageError) as exc:
            reason = exc.reason if isinstance(exc, StorageError) else f"not valid JSON: {exc}"
            cut = None if isinstance(exc, StorageError) else json_cut_off(storage, entry)
            errors.append(ScanError(storage.display(entry.path), reason, cut))
            continue
        return entry, state, records
    return None, None, []


def read_tune_experiment(
    storage: Storage,
    path: str,
    entries: list[Entry],
    workers: int = 8,
    progress: Progress | None = None,
    cache: ScanCache | None = None,
) -> Experiment:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    experiment = Experiment(path=storage.display(path), name=name, layout=Layout.TUNE)
    state_entries = [e for e in entries if _is_state_file(e)]
    experiment.state_files = len(state_entries)
    candidates = [e for e in entries if e.is_dir and not e.name.startswith((".", "checkpoint_"))]

    # Object stores list the whole experiment in a few requests (a thousand keys each), so no
    # trial dir is listed on its own; a local disk lists each dir in the pool as it reads it.
    tree = _list_tree(storage, path, experiment.errors)
    # Trial dirs are read in the pool while this process parses the experiment state: the two
    # do not depend on each other until they are merged.
    by_dir: dict[str, Trial | None] = {}
    jobs = [_ReadJob(e.path, e.name, tree.get(e.path, []) if tree else None) for e in candidates]
    records: list[TrialRecord] = []
    interrupted = False
    try:
        with _reading(storage, jobs, workers, cache) as outcomes:
            records = _read_state_into(experiment, storage, state_entries, cache)
            for done, (dirname, trial, errors) in enumerate(outcomes, start=1):
                by_dir[dirname] = trial
                experiment.errors.extend(errors)
                if progress:
                    progress(done, len(candidates))
    except KeyboardInterrupt:
        # Ctrl-C: the trials read so far make a partial report (the caller exits 130).
        interrupted = True
        experiment.errors.append(
            ScanError(
                experiment.path,
                f"interrupted after reading {len(by_dir)} of {len(candidates)} trial dirs: "
                "the report covers those",
            )
        )

    paths = {e.name: storage.display(e.path) for e in candidates}
    claimed: set[str] = set()
    for record in records:
        logdir = record.relative_logdir
        trial = by_dir.get(logdir) if logdir else None
        if trial is not None:
            claimed.add(logdir)
            apply_record(trial, record)
        elif interrupted:
            continue  # its dir was not read: no rule may judge it by what is missing
        else:
            trial = trial_from_record(record, logdir or record.trial_id, paths.get(logdir or ""))
        experiment.trials.append(trial)
    # Dirs the state does not list: trials of an older run of this experiment, or every trial
    # when the state never reached storage.
    unlisted = [t for n, t in by_dir.items() if t is not None and n not in claimed]
    earlier = _earlier_run(unlisted, records)
    experiment.earlier_run_dirs = sorted(t.name for t in earlier)
    experiment.trials += [t for t in unlisted if t not in earlier]
    if interrupted:
        for trial in experiment.trials:
            complete_from_dir(trial)
        raise ScanInterrupted(experiment)
    _read_missing_configs(storage, experiment, tree, {e.name: e.path for e in candidates}, workers)
    for trial in experiment.trials:
        complete_from_dir(trial)
    _set_layout(experiment, entries, records)
    _set_times(experiment)
    return experiment


# A Tune trial id is its run's experiment id and the trial's index ("93fa1_00001"): every
# Tuner.fit draws a new experiment id, and a restore keeps the old one.
RUN_ID = re.compile(r"^([0-9a-f]{5,8})_\d{5}$")


def _run_id(trial_id: str) -> str | None:
    found = RUN_ID.match(trial_id)
    return found.group(1) if found else None


def _earlier_run(unlisted: list[Trial], records: list[TrialRecord]) -> list[Trial]:
    """Trial dirs of an earlier run under the same experiment name: a new `Tuner.fit` with
    a name in use writes its trials beside the old ones and a state that lists only its own.
    A dir the newest state does not list is of an earlier run when its trial id names
    another run than every trial the state lists; a state written before its newest trials
    started (the driver died first) lists trials of the same run, so their dirs stay."""
    runs = {_run_id(r.trial_id) for r in records}
    if not runs or None in runs:
        return []
    return [t for t in unlisted if (run := _run_id(t.trial_id)) is not None and run not in runs]


def _read_state_into(
    experiment: Experiment,
    storage: Storage,
    state_entries: list[Entry],
    cache: ScanCache | None = None,
) -> list[TrialRecord]:
    errors: list[ScanError] = []
    if cache is None:
        used, state, records = _load_state(storage, state_entries, errors)
    else:
        newest = max(state_entries, key=lambda e: e.name, default=None)
        used, state, records, errors = (
            cache.state(storage, newest, partial(_load_state_once, storage, state_entries))
            if newest is not None
            else (None, None, [], [])
        )
    experiment.errors += errors
    if used is not None and state is not None:
        experiment.state_file = used.name
        experiment.runner = state.runner
        start = state.stats.get("start_time")
        experiment.start_time = float(start) if isinstance(start, (int, float)) else None
        if state.format == "checkpoints":
            experiment.layout = Layout.TUNE_LEGACY
    elif state_entries:
        experiment.errors.append(
            ScanError(experiment.path, "no experiment_state file could be read; trials from dirs")
        )
    return records


def _load_state_once(storage: Storage, state_entries: list[Entry]):
    errors: list[ScanError] = []
    return (*_load_state(storage, state_entries, errors), errors)


# Below this many trial dirs a process pool costs more than it saves.
PROCESS_POOL_MIN_TRIALS = 200


class _ReadJob(NamedTuple):
    path: str
    name: str
    entries: list[Entry] | None  # from the experiment's listing; None: list the dir


def _read_dir(storage: Storage, job: _ReadJob) -> tuple[str, Trial | None, list[ScanError]]:
    # params.json waits for the state, which holds every trial's config: it is rarely needed
    # (one request fewer per trial remotely, one file fewer to open and decode locally).
    trial, errors = read_trial_dir(storage, job.path, job.name, job.entries, with_params=False)
    return job.name, trial, errors


def _list_tree(
    storage: Storage, path: str, errors: list[ScanError]
) -> dict[str, list[Entry]] | None:
    try:
        return storage.list_tree(path)
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))
        return {}


def _read_missing_configs(
    storage: Storage,
    experiment: Experiment,
    tree: dict[str, list[Entry]] | None,
    dirs: dict[str, str],
    workers: int,
) -> None:
    """params.json of the trials the experiment state gave no config (none, when the state
    was read), in parallel on remote storage. `tree`: the experiment's listing, when it was
    listed whole; else each wanted dir's params.json is looked up."""
    wanted = [(t, dirs[t.name]) for t in experiment.trials if not t.config and t.name in dirs]
    if not wanted:
        return

    def read(item: tuple[Trial, str]) -> None:
        trial, path = item
        entry = _params_entry(storage, tree, path)
        if entry is not None:
            trial.config = read_params(storage, entry, experiment.errors)

    if isinstance(storage, LocalStorage):
        list(map(read, wanted))
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(len(wanted), workers))) as pool:
        list(pool.map(read, wanted))


def _params_entry(storage: Storage, tree: dict[str, list[Entry]] | None, path: str) -> Entry | None:
    if tree is not None:
        files = tree.get(path, [])
        return next((e for e in files if e.name == "params.json" and e.is_file), None)
    try:
        entry = storage.stat(storage.join(path, "params.json"))
    except StorageError:
        return None
    return entry if entry is not None and entry.is_file else None


def _read_dir_cached(
    storage: Storage, cache: ScanCache, job: _ReadJob
) -> tuple[str, Trial | None, list[ScanError]]:
    entries = job.entries
    if entries is None:
        try:
            entries = storage.list_dir(job.path)
        except StorageError as exc:
            return job.name, None, [ScanError(exc.path, exc.reason)]
    listed = job._replace(entries=entries)
    trial, errors = cache.trial(storage, job.path, entries, lambda: _read_dir(storage, listed)[1:])
    return job.name, trial, errors


@contextmanager
def _reading(
    storage: Storage, jobs: list[_ReadJob], workers: int, cache: ScanCache | None = None
) -> Iterator[Iterator[tuple[str, Trial | None, list[ScanError]]]]:
    """Start reading trial dirs and yield their results in job order.

    Big local sweeps use forked processes (the byte scanning is CPU-bound and holds the GIL)
    and overlap with the caller's state parsing; remote storage uses threads (reads wait on
    the network); small local ones read in this process, where a pool costs more than it saves.
    """
    read = (
        partial(_read_dir, storage) if cache is None else partial(_read_dir_cached, storage, cache)
    )
    local = isinstance(storage, LocalStorage)
    # A cache lives in this process: forked readers could not fill it.
    small = len(jobs) < PROCESS_POOL_MIN_TRIALS or not can_fork()
    if local and (small or cache is not None):
        yield map(read, jobs)  # lazy: runs as the caller iterates
        return
    from concurrent.futures import ThreadPoolExecutor

    if local:
        # No threads run at this point (the progress bar starts after the first result).
        processes = min(cpus(), workers)
        pool = forked_pool(processes)
        # Few, large chunks: each task costs ~0.4 ms of queueing, more than reading a trial.
        chunk = max(1, len(jobs) // (processes * 4))
    else:
        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        chunk = 1
    try:
        yield pool.map(read, jobs, chunksize=chunk)
    except BaseException:
        # Ctrl-C (or a failure) while reading: drop the reads not started instead of
        # finishing them. Reader processes are waited for (each ends after the chunk it is
        # in): a forked reader left behind would hold the caller's stdout open. Threads are
        # not: a read in flight on a slow object store ends with the process.
        pool.shutdown(wait=local, cancel_futures=True)
        raise
    pool.shutdown()


class ScanInterrupted(Exception):
    """Ctrl-C while an experiment was read: what was read so far, for a partial report."""

    def __init__(self, experiment: Experiment) -> None:
        super().__init__(experiment.path)
        self.experiment = experiment


def _set_layout(experiment: Experiment, entries: list[Entry], records: list[TrialRecord]) -> None:
    names = {e.name for e in entries}
    trainables = {r.trainable_name for r in records if r.trainable_name}
    if names & V1_MARKERS or any(t.endswith("Trainer") for t in trainables):
        experiment.layout = Layout.TRAIN_V1
        return


def _set_times(experiment: Experiment) -> None:
    ends = [t.last_result_time for t in experiment.trials if t.last_result_time]
    ends = [t for t in ends if t > 0]
    if ends:
        experiment.end_time = max(ends)
    # The state's start_time is the driver's latest start: after a Tuner.restore, trials
    # started before it.
    starts = [t.start_time for t in experiment.trials if t.start_time]
    if experiment.start_time is not None:
        starts.append(experiment.start_time)
    experiment.start_time = min(starts) if starts else None
