"""Ray Train V2 run dirs: checkpoint_manager_snapshot.json plus checkpoint_<timestamp>/ dirs.

V2 keeps no errors, results or status on storage; whether the run failed comes from the
driver's output and the session logs, merged in later (see `scan._merge`), or from
`ray-doctor-errors.jsonl`, which ray-doctor's Train callback writes into the run dir
(`ray_doctor.integrations.train`; the format is in docs/train-errors.md).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from ray_doctor.collectives import PEER_SYMPTOM
from ray_doctor.model import (
    Checkpoint,
    Evidence,
    Experiment,
    Failure,
    Layout,
    ScanError,
    Trial,
    TrialStatus,
)
from ray_doctor.scan._cutoff import json_cut_off
from ray_doctor.scan._results import scalars
from ray_doctor.scan._traceback import parse_failure
from ray_doctor.storage import Entry, Storage, StorageError

SNAPSHOT = "checkpoint_manager_snapshot.json"
V2_CHECKPOINT = re.compile(r"^checkpoint_(?P<ts>\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}(?:\.\d+)?)$")
MAX_SNAPSHOT = 64 * 1024 * 1024
# Each rank's exception, one JSON object a line, kept by ray-doctor's Train callback.
RANK_ERRORS = "ray-doctor-errors.jsonl"
RANK_ERRORS_VERSION = 1
MAX_RANK_ERRORS = 200  # lines the callback keeps (the newest); the reader reads no more
MAX_RANK_ERRORS_BYTES = 16 * 1024 * 1024


def is_train_v2_run(entries: list[Entry]) -> bool:
    names = {e.name for e in entries}
    if SNAPSHOT in names or RANK_ERRORS in names:
        return True
    # A run that reported checkpoints but whose snapshot is gone still has their dirs.
    return any(e.is_dir and V2_CHECKPOINT.match(e.name) for e in entries)


def _timestamp(name: str) -> float | None:
    match = V2_CHECKPOINT.match(name)
    if not match:
        return None
    text = match["ts"]
    fmt = "%Y-%m-%d_%H-%M-%S.%f" if "." in text else "%Y-%m-%d_%H-%M-%S"
    try:
        return datetime.strptime(text, fmt).timestamp()
    except ValueError:
        return None


def _result(value: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(value, dict):
        return None
    name = value.get("checkpoint_dir_name")
    metrics = value.get("metrics")
    if not isinstance(name, str):
        return None
    return name, scalars(metrics) if isinstance(metrics, dict) else {}


def read_train_v2_run(storage: Storage, path: str, entries: list[Entry]) -> Experiment:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    display = storage.display(path)
    experiment = Experiment(path=display, name=name, layout=Layout.TRAIN_V2)
    snapshot: dict[str, Any] = {}
    snapshot_entry = next((e for e in entries if e.name == SNAPSHOT and e.is_file), None)
    if snapshot_entry is not None:
        snapshot = _read_snapshot(storage, snapshot_entry, experiment.errors)
    version = snapshot.get("ray_version")
    experiment.ray_version = version if isinstance(version, str) else None

    on_storage = {e.name: e for e in entries if e.is_dir and V2_CHECKPOINT.match(e.name)}
    checkpoints: dict[str, Checkpoint] = {}
    results = snapshot.get("checkpoint_results")
    for item in results if isinstance(results, list) else []:
        parsed = _result(item)
        if parsed:
            cp_name, metrics = parsed
            checkpoints[cp_name] = Checkpoint(
                name=cp_name,
                path=storage.display(storage.join(path, cp_name)),
                exists=cp_name in on_storage,
                metrics=metrics,
            )
    for cp_name, entry in on_storage.items():
        checkpoints.setdefault(cp_name, Checkpoint(cp_name, storage.display(entry.path)))

    latest = _result(snapshot.get("latest_checkpoint_result"))
    if latest and latest[0] not in checkpoints:
        checkpoints[latest[0]] = Checkpoint(
            latest[0],
            storage.display(storage.join(path, latest[0])),
            exists=latest[0] in on_storage,
            metrics=latest[1],
        )
    ordered = sorted(checkpoints.values(), key=lambda c: (_timestamp(c.name) or 0.0, c.name))
    times = [t for t in (_timestamp(c.name) for c in ordered) if t is not None]
    reports = snapshot.get("current_report_index")
    run = Trial(
        trial_id=name,
        name=name,
        path=display,
        status=TrialStatus.UNKNOWN,
        last_result=latest[1] if latest else (ordered[-1].metrics if ordered else {}),
        checkpoints=ordered,
        start_time=times[0] if times else None,
        last_result_time=times[-1] if times else None,
    )
    if isinstance(reports, int) and not isinstance(reports, bool):
        run.last_result.setdefault("reports", reports)
    experiment.trials = [run]
    experiment.start_time = run.start_time
    experiment.end_time = run.last_result_time
    errors_entry = next((e for e in entries if e.name == RANK_ERRORS and e.is_file), None)
    if errors_entry is not None:
        _attach_rank_errors(run, _read_rank_errors(storage, errors_entry, experiment.errors))
    return experiment


def run_gave_up(experiment: Experiment) -> bool:
    """The rank errors say Train stopped retrying (more failures than max_failures allowed)."""
    return any(trial.status == TrialStatus.ERROR for trial in experiment.trials)


def _read_rank_errors(
    storage: Storage, entry: Entry, errors: list[ScanError]
) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of each well-formed line; bad lines are reported, not fatal."""
    display = storage.display(entry.path)
    try:
        data = storage.read_bytes(entry.path, MAX_RANK_ERRORS_BYTES)
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))
        return []
    records = []
    bad = []
    for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            bad.append(lineno)
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int):
            records.append((lineno, record))
        else:
            bad.append(lineno)
    if bad:
        lines = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        errors.append(ScanError(display, f"lines that are not rank error records: {lines}"))
    return [(n, r) for n, r in records[-MAX_RANK_ERRORS:]]


def _attach_rank_errors(run: Trial, records: list[tuple[int, dict[str, Any]]]) -> None:
    """One failure per attempt and error (ranks that failed alike share one), attempts in
    file order; the newest run's attempts and max_failures say whether Train gave up.

    Within an attempt the callback writes the ranks in rank order, all at one time, so the
    file cannot say which failed first. A rank's own error is put after the errors that only
    say a peer went away (gloo's "Connection closed by peer", a collective timeout): the
    model's last failure is the one that ended the run, and that is the rank that took the
    others' collectives down, not one of them."""
    if not records:
        return
    path = f"{run.path}/{RANK_ERRORS}" if run.path else RANK_ERRORS
    grouped: dict[tuple[Any, Any, str, str], Failure] = {}
    attempt_of: dict[int, int] = {}  # id(failure) -> its attempt's place in the file
    places: dict[tuple[Any, Any], int] = {}  # (run_id, attempt) -> its place in the file
    for lineno, record in records:
        failure = _record_failure(lineno, record, path)
        attempt = (record.get("run_id"), record.get("attempt"))
        key = (*attempt, failure.exc_type or "", failure.message)
        known = grouped.get(key)
        if known is not None:
            known.ranks = sorted(set(known.ranks) | set(failure.ranks))
            continue
        grouped[key] = failure
        attempt_of[id(failure)] = places.setdefault(attempt, len(places))
    run.failures += sorted(
        grouped.values(),
        key=lambda f: (attempt_of[id(f)], PEER_SYMPTOM.search(f.joined) is None),
    )
    newest = records[-1][1]
    latest_run = [r for _, r in records if r.get("run_id") == newest.get("run_id")]
    attempts = max(
        (r.get("attempt") for r in latest_run if isinstance(r.get("attempt"), int)), default=None
    )
    allowed = newest.get("max_failures")
    if isinstance(allowed, int) and not isinstance(allowed, bool):
        run.max_failures = allowed
    run.num_failures = attempts
    allowed = run.max_failures
    if allowed is not None and allowed >= 0 and attempts is not None and attempts > allowed:
        run.status = TrialStatus.ERROR


def _record_failure(lineno: int, record: dict[str, Any], path: str) -> Failure:
    rank = record["rank"]
    kind = str(record.get("type") or "")
    message = str(record.get("message") or "")
    text = record.get("traceback")
    if not isinstance(text, str) or not text.strip():
        text = f"{kind}: {message}" if kind else message
    # The whole traceback sits on one line of the file: every line of it points there.
    failure = parse_failure([(lineno, line) for line in text.splitlines()], path)
    if kind and failure.exc_type is None:
        failure.exc_type, failure.message = kind, message
    failure.ranks = sorted(set(failure.ranks) | {rank})
    failure.time = _ray_date(record.get("time"))
    excerpt = f"rank {rank}: {failure.summary}"
    failure.source = Evidence(path, lineno, excerpt)
    failure.exc_line = Evidence(path, lineno, excerpt)
    return failure


def _ray_date(text: Any) -> str | None:
    """An ISO time as Ray writes failure times (`2025-01-01_12-00-00`), UTC."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.strftime("%Y-%m-%d_%H-%M-%S")


def _read_snapshot(storage: Storage, entry: Entry, errors: list[ScanError]) -> dict[str, Any]:
    try:
        data = json.loads(storage.read_bytes(entry.path, MAX_SNAPSHOT))
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))
        return {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        cut = json_cut_off(storage, entry)
        errors.append(ScanError(storage.display(entry.path), f"not valid JSON: {exc}", cut))
        return {}
    if not isinstance(data, dict):
        errors.append(ScanError(storage.display(entry.path), "not a JSON object"))
        return {}
    return data
