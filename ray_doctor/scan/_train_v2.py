"""Ray Train V2 run dirs: checkpoint_manager_snapshot.json plus checkpoint_<timestamp>/ dirs.

V2 keeps no errors, results or status on storage; whether the run failed comes from the
driver's output and the session logs, merged in later (see `scan._merge`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from ray_doctor.model import Checkpoint, Experiment, Layout, ScanError, Trial, TrialStatus
from ray_doctor.scan._cutoff import json_cut_off
from ray_doctor.scan._results import scalars
from ray_doctor.storage import Entry, Storage, StorageError

SNAPSHOT = "checkpoint_manager_snapshot.json"
V2_CHECKPOINT = re.compile(r"^checkpoint_(?P<ts>\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}(?:\.\d+)?)$")
MAX_SNAPSHOT = 64 * 1024 * 1024


def is_train_v2_run(entries: list[Entry]) -> bool:
    names = {e.name for e in entries}
    if SNAPSHOT in names:
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
    return experiment


def _read_snapshot(storage: Storage, entry: Entry, errors: list[ScanError]) -> dict[str, Any]:
    try:
        data = json.loads(storage.read_bytes(entry.path, MAX_SNAPSHOT))
    except StorageError as exc:
        errors.append(ScanError(exc.path, exc.reason))
        return {}
    except (ValueError, UnicodeDecodeError) as exc:
        cut = json_cut_off(storage, entry)
        errors.append(ScanError(storage.display(entry.path), f"not valid JSON: {exc}", cut))
        return {}
    if not isinstance(data, dict):
        errors.append(ScanError(storage.display(entry.path), "not a JSON object"))
        return {}
    return data
