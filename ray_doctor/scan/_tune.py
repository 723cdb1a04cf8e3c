"""Tune and Train V1 experiment dirs: experiment_state-*.json plus one dir per trial."""

from __future__ import annotations

import fnmatch
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial

from ray_doctor.model import Experiment, Layout, ScanError, Trial
from ray_doctor.scan._state import StateError, StateFile, TrialRecord, read_state
from ray_doctor.scan._trial import looks_like_trial_dir, read_trial
from ray_doctor.storage import Entry, LocalStorage, Storage, StorageError

STATE_GLOB = "experiment_state-*.json"
V1_MARKERS = {"trainer.pkl"}

Progress = Callable[[int, int], None]


def is_tune_experiment(entries: list[Entry]) -> bool:
    return any(e.is_file and fnmatch.fnmatch(e.name, STATE_GLOB) for e in entries)


def _load_state(
    storage: Storage, state_entries: list[Entry], errors: list[ScanError]
) -> tuple[Entry | None, StateFile | None, list[TrialRecord]]:
    """The newest state file that parses; older ones stand in, with the failure recorded."""
    for entry in sorted(state_entries, key=lambda e: e.name, reverse=True):
        try:
            state, trials = read_state(storage, entry.path)
            records = list(trials)
        except (StateError, StorageError) as exc:
            reason = exc.reason if isinstance(exc, StorageError) else f"not valid JSON: {exc}"
            errors.append(ScanError(storage.display(entry.path), reason))
            continue
        return entry, state, records
    return None, None, []


def read_tune_experiment(
    storage: Storage,
    path: str,
    entries: list[Entry],
    workers: int = 8,
    progress: Progress | None = None,
) -> Experiment:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    experiment = Experiment(path=storage.display(path), name=name, layout=Layout.TUNE)
    state_entries = [e for e in entries if e.is_file and fnmatch.fnmatch(e.name, STATE_GLOB)]
    experiment.state_files = len(state_entries)
    used, state, records = _load_state(storage, state_entries, experiment.errors)
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

    dirs = {e.name: e for e in entries if e.is_dir}
    jobs: list[tuple[str | None, TrialRecord | None, str]] = []
    claimed: set[str] = set()
    for record in records:
        logdir = record.relative_logdir
        if logdir and logdir in dirs:
            claimed.add(logdir)
            jobs.append((dirs[logdir].path, record, logdir))
        else:
            jobs.append((None, record, logdir or record.trial_id))
    # Dirs the state does not list: trials of an older run of this experiment, or every trial
    # when the state never reached storage. Only dirs with trial files count.
    for dirname, entry in dirs.items():
        if dirname not in claimed and not dirname.startswith((".", "checkpoint_")):
            jobs.append((entry.path, None, dirname))

    trials = _read_trials(storage, jobs, workers, progress, experiment.errors)
    experiment.trials = [t for t in trials if t is not None]
    _set_layout(experiment, entries, records)
    _set_times(experiment)
    return experiment


Job = tuple[str | None, TrialRecord | None, str]
# Below this many trials a process pool costs more than it saves.
PROCESS_POOL_MIN_TRIALS = 200


def _read_job(storage: Storage, job: Job) -> tuple[Trial | None, list[ScanError]]:
    path, record, name = job
    if record is None and path is not None:
        try:
            listing = storage.list_dir(path)
        except StorageError as exc:
            return None, [ScanError(exc.path, exc.reason)]
        if not looks_like_trial_dir(listing):
            return None, []
        return read_trial(storage, path, None, name, listing)
    return read_trial(storage, path, record, name)


def _executor(storage: Storage, jobs: int, workers: int) -> Executor:
    """Processes for big local sweeps (the byte scanning is CPU-bound and holds the GIL);
    threads otherwise (remote reads wait on the network, not the CPU)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (
        isinstance(storage, LocalStorage)
        and jobs >= PROCESS_POOL_MIN_TRIALS
        and (cpus or 1) > 1
        and "fork" in multiprocessing.get_all_start_methods()
    ):
        # fork: the children inherit the imported modules and start in milliseconds. No
        # threads are running at this point (the progress bar starts after the first result).
        context = multiprocessing.get_context("fork")
        return ProcessPoolExecutor(max_workers=min(cpus or 1, workers), mp_context=context)
    return ThreadPoolExecutor(max_workers=max(1, workers))


def _read_trials(
    storage: Storage,
    jobs: list[Job],
    workers: int,
    progress: Progress | None,
    errors: list[ScanError],
) -> list[Trial | None]:
    results: list[Trial | None] = []
    total = len(jobs)
    with _executor(storage, total, workers) as pool:
        chunk = max(1, total // (workers * 8)) if isinstance(pool, ProcessPoolExecutor) else 1
        outcomes = pool.map(partial(_read_job, storage), jobs, chunksize=chunk)
        for done, (trial, trial_errors) in enumerate(outcomes, start=1):
            results.append(trial)
            errors.extend(trial_errors)
            if progress:
                progress(done, total)
    return results


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
    if experiment.start_time is None:
        starts = [t.start_time for t in experiment.trials if t.start_time]
        experiment.start_time = min(starts) if starts else None
