"""`DoctorCallback`: ray-doctor inside a Ray Train V2 run.

    from ray_doctor.integrations.train import DoctorCallback

    trainer = TorchTrainer(..., run_config=ray.train.RunConfig(callbacks=[DoctorCallback()]))

Train V2 keeps no errors on storage: once the driver's output is gone, so is why the run
failed. When workers raise, this callback (it runs in the Train controller) appends each
rank's exception to `ray-doctor-errors.jsonl` in the run dir, through the run's own storage
filesystem (a local path, s3://, gs://, a custom `storage_filesystem`), then reads the run back
and prints ray-doctor's verdict; Ray forwards it to the driver's output. `ray-doctor inspect`
of the run dir reads the file, so the per-rank errors survive the cluster.

Importing this module does not import Ray: the class is built on first use, with
`ray.train.UserCallback` as its base.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import datetime, timezone
from typing import Any, TextIO

from ray_doctor.integrations._verdict import Verdict, inspect_command
from ray_doctor.rules import INSPECT_RULES, LIVE_RULES, run_rules
from ray_doctor.scan import scan_storage
from ray_doctor.scan._train_v2 import (
    MAX_RANK_ERRORS,
    RANK_ERRORS,
    RANK_ERRORS_VERSION,
    run_gave_up,
)
from ray_doctor.storage import storage_for_filesystem

MAX_MESSAGE = 8 * 1024
MAX_TRACEBACK = 32 * 1024  # the end of a traceback is kept: the exception line is there


class _TrainDiagnosis:
    """The callback's behaviour, free of Ray (the Ray base class is added in `__getattr__`)."""

    def __init__(
        self,
        report_path: str | os.PathLike | None = None,
        min_severity: str = "warning",
        quiet_if_healthy: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.verdict = Verdict(report_path, min_severity, quiet_if_healthy, stream)
        self.attempt = 0  # worker group failures seen in this run

    def __getstate__(self) -> dict[str, Any]:
        # Ray ships the callback to the Train controller: a stream does not pickle.
        state = dict(self.__dict__)
        state["verdict"] = self.verdict.shippable()
        return state

    @property
    def event_seconds(self) -> list[float]:
        return self.verdict.event_seconds

    def after_report(self, run_context, metrics, checkpoint) -> None:
        pass  # nothing to diagnose in a report: this hook is Ray's, kept as a no-op

    def after_exception(self, run_context, worker_exceptions: dict[int, BaseException]) -> None:
        self.attempt += 1
        with self.verdict.guarded("keeping the ranks' errors"):
            self._persist(run_context, worker_exceptions)
        with self.verdict.guarded("diagnosis of the failed workers"):
            self._diagnose(run_context)

    def _run_dir(self, run_context) -> tuple[Any, str]:
        context = run_context.run_config.storage_context
        return context.storage_filesystem, context.experiment_fs_path

    def _persist(self, run_context, worker_exceptions: dict[int, BaseException]) -> None:
        filesystem, run_dir = self._run_dir(run_context)
        max_failures = run_context.run_config.failure_config.max_failures
        now = datetime.now(tz=timezone.utc).isoformat(timespec="milliseconds")
        tracebacks = _worker_tracebacks()
        lines = []
        for rank, error in sorted(worker_exceptions.items()):
            record = rank_error_record(rank, error, tracebacks.get(rank))
            record.update(attempt=self.attempt, max_failures=max_failures, time=now)
            record["run_id"] = run_context.run_id
            lines.append(json.dumps(record, ensure_ascii=False))
        append_lines(filesystem, f"{run_dir}/{RANK_ERRORS}", lines)

    def _diagnose(self, run_context) -> None:
        filesystem, run_dir = self._run_dir(run_context)
        storage = storage_for_filesystem(filesystem, run_dir)
        result = scan_storage(storage, run_dir, workers=1)
        experiment = result.experiments[0]
        final = run_gave_up(experiment)
        findings = run_rules(result, INSPECT_RULES if final else LIVE_RULES)
        written = self.verdict.write_report(result, findings) if final else None
        retry = "" if final else f" (attempt {self.attempt}; Train retries it)"
        title = f"{experiment.name}: workers failed{retry}"
        full = written or inspect_command(storage.display(run_dir))
        self.verdict.say(self.verdict.lines(title, findings, full))


def _worker_tracebacks() -> dict[int, str]:
    """Each failed rank's traceback text as Train captured it on the worker.

    Ray 2.60 hands `after_exception` the bare exceptions: their tracebacks did not survive the
    trip from the workers. Train keeps the text beside them in the poll status it is
    dispatching (`worker_group_status.worker_statuses[rank].error._traceback_str`), a few
    frames up this call. Best effort: when that is not there, the records keep the type and
    message alone.
    """
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return {}
        statuses = getattr(frame.f_locals.get("worker_group_status"), "worker_statuses", None)
        if isinstance(statuses, dict):
            found = {}
            for rank, worker in statuses.items():
                text = getattr(getattr(worker, "error", None), "_traceback_str", None)
                if isinstance(rank, int) and isinstance(text, str):
                    found[rank] = text
            return found
        frame = frame.f_back
    return {}


def rank_error_record(rank: int, error: BaseException, traceback_text: str | None) -> dict:
    """One line of ray-doctor-errors.jsonl without its run fields (docs/train-errors.md)."""
    base = getattr(error, "_base_exc", None) or error
    text = traceback_text or getattr(error, "_traceback_str", None)
    if not isinstance(text, str):
        text = "".join(traceback.format_exception(type(base), base, base.__traceback__))
    return {
        "version": RANK_ERRORS_VERSION,
        "rank": rank,
        "type": type(base).__name__,
        "message": str(base)[:MAX_MESSAGE],
        "traceback": text[-MAX_TRACEBACK:],
    }


def append_lines(filesystem, path: str, lines: list[str]) -> None:
    """Append through a pyarrow filesystem. Object stores cannot append: the small file is
    read and written again whole, keeping its last MAX_RANK_ERRORS lines."""
    import pyarrow.fs as pafs

    old: list[str] = []
    if filesystem.get_file_info(path).type == pafs.FileType.File:
        with filesystem.open_input_stream(path) as stream:
            old = stream.read().decode("utf-8", "replace").splitlines()
    kept = (old + lines)[-MAX_RANK_ERRORS:]
    with filesystem.open_output_stream(path) as stream:
        stream.write(("\n".join(kept) + "\n").encode("utf-8"))


def __getattr__(name: str) -> Any:
    if name == "DoctorCallback":
        from ray.train import UserCallback

        cls = type(
            "DoctorCallback",
            (_TrainDiagnosis, UserCallback),
            {"__module__": __name__, "__doc__": _CALLBACK_DOC},
        )
        globals()[name] = cls  # one class, so pickles of it load back as the same one
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_CALLBACK_DOC = """A Train V2 callback: keeps each rank's exception on the run's storage and
prints ray-doctor's diagnosis into the driver's output.

Args:
    report_path: write the JSON report (the `ray-doctor inspect --format json` contract) here
        once the run has failed for good (on the node of the Train controller). Default: no
        file; the verdict names the command to run.
    min_severity: the least severe finding printed: "error", "warning" (default) or "info".
    quiet_if_healthy: print nothing when there is no finding at `min_severity` or above.
    stream: where to print (default: the controller's stdout, which Ray forwards to the
        driver).

It never fails the run: an error inside it is printed as one line and the run goes on.
"""

__all__ = ["DoctorCallback"]  # noqa: F822 - built on first access by __getattr__
