"""One trial dir: result.json / progress.csv, error.txt, params.json, checkpoint_* dirs."""

from __future__ import annotations

import json
import re
from functools import partial

from ray_doctor.model import Checkpoint, ScanError, Trial, TrialStatus
from ray_doctor.scan._cutoff import json_cut_off
from ray_doctor.scan._errorfile import parse_error_lines
from ray_doctor.scan._results import (
    iter_result_rows,
    last_row,
    summarize_progress_csv,
    summarize_results,
)
from ray_doctor.scan._state import TrialRecord, opaque
from ray_doctor.storage import Entry, Storage, StorageError

TRIAL_FILES = {"result.json", "progress.csv", "params.json", "error.txt", "params.pkl"}
CHECKPOINT_DIR = re.compile(r"^checkpoint_(?P<index>\d+)$")
# 2.60 names trial dirs `<trainable>_<trial_id>_<tag>_<date>`; trial ids are `xxxxx_NNNNN`
# (BasicVariantGenerator) or 8 hex chars (searchers, restarted trials).
TRIAL_ID_IN_NAME = re.compile(r"_(?P<id>[0-9a-f]{5}_\d{5}|[0-9a-f]{8})(?:_|$)")
MAX_PARAMS = 4 * 1024 * 1024
LEGACY_MARKERS = {".is_checkpoint", ".tune_metadata"}


def looks_like_trial_dir(entries: list[Entry]) -> bool:
    names = {e.name for e in entries if not e.is_dir}
    return bool(names & TRIAL_FILES)


def trial_id_from_name(name: str) -> str:
    match = TRIAL_ID_IN_NAME.search(name)
    return match["id"] if match else name


def read_trial_dir(
    storage: Storage,
    path: str,
    name: str,
    entries: list[Entry] | None = None,
    with_params: bool = True,
) -> tuple[Trial | None, list[ScanError]]:
    """A trial from its dir alone (no experiment state): None when the dir holds no trial
    files (a PENDING trial's empty dir, or a dir that is not a trial at all).

    `with_params=False` leaves params.json for `read_params` to read only when the
    experiment state has no config for the trial (one request fewer per trial remotely).
    """
    errors: list[ScanError] = []
    if entries is None:
        try:
            entries = storage.list_dir(path)
        except StorageError as exc:
            return None, [ScanError(exc.path, exc.reason)]
    if not looks_like_trial_dir(entries):
        return None, errors
    trial = Trial(
        trial_id=trial_id_from_name(name),
        name=name,
        path=storage.display(path),
        status=TrialStatus.UNKNOWN,
        in_state=False,
    )
    files = {e.name: e for e in entries if e.is_file}
    unreadable = _unreadable_trial_files(storage, entries)
    errors += unreadable
    checkpoint_dirs = [e.name for e in entries if e.is_dir and CHECKPOINT_DIR.match(e.name)]
    _read_history(storage, trial, files, errors, checkpoint_dirs)
    _read_errors(storage, trial, files, errors)
    if trial.error_file is None:
        # An error.txt that cannot be read is still where the error was: rules say so.
        trial.error_file = next((e.path for e in unreadable if e.path.endswith("error.txt")), None)
    if with_params and "params.json" in files:
        trial.config = read_params(storage, files["params.json"], errors)
    trial.checkpoints = _checkpoints(storage, path, trial, entries)
    return trial, errors


def _unreadable_trial_files(storage: Storage, entries: list[Entry]) -> list[ScanError]:
    """A trial file that is not a regular file (a FIFO, a device, a dangling link) is never
    opened: reading a FIFO would wait forever, a device would never end. Say so, so that a
    missing history or error text is not taken for one Ray never wrote."""
    odd = [e for e in entries if e.name in TRIAL_FILES and not e.is_file and not e.is_dir]
    return [ScanError(storage.display(e.path), _why_unreadable(storage, e)) for e in odd]


def _why_unreadable(storage: Storage, entry: Entry) -> str:
    try:
        found = storage.stat(entry.path)
    except StorageError as exc:
        return f"{exc.reason}: not read"
    return "not a regular file: not read" if found else "a link to nothing: not read"


def complete_from_dir(trial: Trial) -> None:
    """For a trial no experiment state describes: its last result comes from result.json,
    and its status from whether a failure came after that."""
    if not trial.last_result and trial.history is not None:
        trial.last_result = last_row(trial.history)
        trial.history.last_line = trial.history.last_row = None
    if not trial.in_state:
        trial.status = _infer_status(trial)


def trial_from_record(record: TrialRecord, name: str, path: str | None) -> Trial:
    """A trial the experiment state lists but whose dir holds nothing (yet)."""
    trial = Trial(record.trial_id, name, path, _status(record.status))
    apply_record(trial, record)
    return trial


TIMESTAMP_RESOLUTION_S = 1.0  # result.json's `timestamp`: int(time.time())


def apply_record(trial: Trial, record: TrialRecord) -> None:
    """Merge what the experiment state says into a trial read from its dir; the state wins
    on status and config, the dir on history."""
    trial.trial_id = record.trial_id
    trial.status = _status(record.status)
    trial.in_state = True
    trial.config = record.config or trial.config
    trial.max_failures = record.max_failures
    trial.num_failures = record.num_failures
    # The state's start_time is the latest start: a trial restored (Tuner.restore) has rows
    # in its dir from before it, and started no later than the first of them. (A row's
    # timestamp is whole seconds: one in the second the trial started is not earlier.)
    state_start, first_row = record.start_time, trial.start_time
    trial.start_time = state_start if state_start is not None else first_row
    if state_start is not None and first_row is not None:
        trial.start_time = min(state_start, first_row + TIMESTAMP_RESOLUTION_S)
    times = [t for t in (record.last_result_time, trial.last_result_time) if t is not None]
    trial.last_result_time = max(times) if times else None
    if record.last_result:
        trial.last_result = record.last_result
        if trial.history is not None:
            trial.history.last_line = trial.history.last_row = None  # not needed twice


def _status(value: str | None) -> TrialStatus:
    try:
        return TrialStatus(value) if value else TrialStatus.UNKNOWN
    except ValueError:
        return TrialStatus.UNKNOWN


def _read_history(
    storage: Storage,
    trial: Trial,
    files: dict[str, Entry],
    errors: list[ScanError],
    checkpoint_dirs: list[str],
) -> None:
    if "result.json" in files:
        path = files["result.json"].path
        try:
            trial.history = summarize_results(storage, path, checkpoint_dirs)
        except StorageError as exc:
            errors.append(ScanError(exc.path, exc.reason))
            return
        trial.history_rows = partial(iter_result_rows, storage, path)
    elif "progress.csv" in files:
        try:
            trial.history = summarize_progress_csv(storage, files["progress.csv"].path)
        except StorageError as exc:
            errors.append(ScanError(exc.path, exc.reason))
            return
    history = trial.history
    if history is None:
        return
    if history.truncated_tail:
        size = _size(storage, files["result.json"]) if "result.json" in files else None
        reason = f"line {history.bad_lines[-1]} is cut off mid-write"
        errors.append(ScanError(history.path, reason, size))
    bad = [
        n for n in history.bad_lines if not (history.truncated_tail and n == history.bad_lines[-1])
    ]
    if bad:
        shown = ", ".join(map(str, bad[:5]))
        errors.append(ScanError(history.path, f"lines that are not JSON rows: {shown}"))
    trial.start_time = history.first_time
    trial.last_result_time = history.last_time


def _read_errors(
    storage: Storage, trial: Trial, files: dict[str, Entry], errors: list[ScanError]
) -> None:
    entry = files.get("error.txt")
    if entry is None:
        return
    trial.error_file = storage.display(entry.path)
    try:
        lines = (line.decode("utf-8", "replace") for line in storage.iter_lines(entry.path))
        trial.failures = parse_error_lines(lines, trial.error_file)
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))


def _size(storage: Storage, entry: Entry) -> int | None:
    if entry.size is not None:
        return entry.size
    try:
        found = storage.stat(entry.path)
    except StorageError:
        return None
    return found.size if found is not None else None


def read_params(storage: Storage, entry: Entry, errors: list[ScanError]) -> dict:
    try:
        data = json.loads(storage.read_bytes(entry.path, MAX_PARAMS))
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))
        return {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        cut = json_cut_off(storage, entry)
        errors.append(ScanError(storage.display(entry.path), f"not valid JSON: {exc}", cut))
        return {}
    return opaque(data) if isinstance(data, dict) else {}


def _checkpoints(
    storage: Storage, path: str, trial: Trial, entries: list[Entry]
) -> list[Checkpoint]:
    reported = trial.history.checkpoint_iterations if trial.history else {}
    found: dict[str, Checkpoint] = {}
    for entry in entries:
        match = CHECKPOINT_DIR.match(entry.name)
        if entry.is_dir and match:
            found[entry.name] = Checkpoint(
                name=entry.name,
                path=storage.display(entry.path),
                index=int(match["index"]),
                iteration=reported.get(entry.name),
            )
    for name, iteration in reported.items():
        if name not in found:
            match = CHECKPOINT_DIR.match(name)
            found[name] = Checkpoint(
                name=name,
                path=storage.display(storage.join(path, name)),
                index=int(match["index"]) if match else None,
                iteration=iteration,
                exists=False,
            )
    return sorted(found.values(), key=lambda c: (c.index is None, c.index or 0, c.name))


def _infer_status(trial: Trial) -> TrialStatus:
    """No experiment state names this trial: say ERROR only when a failure came last."""
    if not trial.failures:
        return TrialStatus.UNKNOWN
    last_failure = trial.failures[-1].time
    last_date = trial.last_result.get("date")
    if last_failure and (not isinstance(last_date, str) or last_failure >= last_date):
        return TrialStatus.ERROR
    return TrialStatus.UNKNOWN
