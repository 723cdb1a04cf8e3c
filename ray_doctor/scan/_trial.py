"""One trial dir: result.json / progress.csv, error.txt, params.json, checkpoint_* dirs."""

from __future__ import annotations

import json
import re
from functools import partial

from ray_doctor.model import Checkpoint, ScanError, Trial, TrialStatus
from ray_doctor.scan._errorfile import parse_error_lines
from ray_doctor.scan._results import (
    iter_result_rows,
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


def read_trial(
    storage: Storage,
    path: str | None,
    record: TrialRecord | None,
    name: str,
    entries: list[Entry] | None = None,
) -> tuple[Trial, list[ScanError]]:
    """Build a Trial from its state record (if any) and its dir on storage (if any)."""
    errors: list[ScanError] = []
    trial = Trial(
        trial_id=record.trial_id if record else trial_id_from_name(name),
        name=name,
        path=storage.display(path) if path else None,
        status=_status(record.status if record else None),
        in_state=record is not None,
    )
    if record:
        trial.config = record.config
        trial.max_failures = record.max_failures
        trial.num_failures = record.num_failures
        trial.start_time = record.start_time
        trial.last_result_time = record.last_result_time
        trial.last_result = record.last_result
    if path is None:
        return trial, errors
    if entries is None:
        try:
            entries = storage.list_dir(path)
        except StorageError as exc:
            errors.append(ScanError(exc.path, exc.reason))
            return trial, errors
    files = {e.name: e for e in entries if e.is_file}
    checkpoint_dirs = [e.name for e in entries if e.is_dir and CHECKPOINT_DIR.match(e.name)]
    _read_history(storage, trial, files, errors, checkpoint_dirs)
    _read_errors(storage, trial, files, errors)
    if not trial.config and "params.json" in files:
        trial.config = _read_params(storage, files["params.json"], errors)
    trial.checkpoints = _checkpoints(storage, path, trial, entries)
    if record is None:
        trial.status = _infer_status(trial)
    return trial, errors


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
        errors.append(ScanError(history.path, f"line {history.bad_lines[-1]} is cut off mid-write"))
    bad = [
        n for n in history.bad_lines if not (history.truncated_tail and n == history.bad_lines[-1])
    ]
    if bad:
        shown = ", ".join(map(str, bad[:5]))
        errors.append(ScanError(history.path, f"lines that are not JSON rows: {shown}"))
    if not trial.last_result and history.last_row:
        trial.last_result = history.last_row
    if trial.start_time is None:
        trial.start_time = history.first_time
    if history.last_time is not None:
        trial.last_result_time = max(trial.last_result_time or 0.0, history.last_time)


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


def _read_params(storage: Storage, entry: Entry, errors: list[ScanError]) -> dict:
    try:
        data = json.loads(storage.read_bytes(entry.path, MAX_PARAMS))
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))
        return {}
    except (ValueError, UnicodeDecodeError) as exc:
        errors.append(ScanError(storage.display(entry.path), f"not valid JSON: {exc}"))
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
    last_row = trial.history.last_row if trial.history and trial.history.last_row else {}
    last_date = last_row.get("date")
    if last_failure and (not isinstance(last_date, str) or last_failure >= last_date):
        return TrialStatus.ERROR
    return TrialStatus.UNKNOWN
