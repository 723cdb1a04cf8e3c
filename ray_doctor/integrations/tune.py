"""`DoctorCallback`: ray-doctor inside a Tune run (Tune sweeps and Train V1 trainers in Tune).

    from ray_doctor.integrations.tune import DoctorCallback

    tuner = tune.Tuner(train_fn, run_config=tune.RunConfig(callbacks=[DoctorCallback()]))

When a trial errors (for good: a failure Tune retries is not an error yet), the callback reads
that trial's dir and prints what `ray-doctor inspect` would say about it; when the experiment
ends, it reads the whole experiment (and the exception stopping `Tuner.fit()`, if one is) and
prints the grouped verdict, and writes the JSON report when asked. It reads what the driver has staged locally over what is already on the
storage_path (`OverlayStorage`), so the files Ray has just written count before they are
uploaded; it writes nothing into the experiment.

Importing this module does not import Ray: the class is built on first use, with Ray's
`tune.Callback` as its base.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, TextIO

from ray_doctor.integrations._verdict import Verdict, inspect_command
from ray_doctor.model import ScanResult
from ray_doctor.rules import INSPECT_RULES, LIVE_RULES, run_rules
from ray_doctor.scan import ScanCache, scan_storage
from ray_doctor.scan._logs import LogResult, parse_text_log
from ray_doctor.scan._merge import merge_logs
from ray_doctor.storage import LocalStorage, Storage, storage_for_filesystem
from ray_doctor.storage._overlay import OverlayStorage


class _TuneDiagnosis:
    """The callback's behaviour, free of Ray (the Ray base class is added in `__getattr__`)."""

    def __init__(
        self,
        report_path: str | os.PathLike | None = None,
        min_severity: str = "warning",
        quiet_if_healthy: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.verdict = Verdict(report_path, min_severity, quiet_if_healthy, stream)
        self._cache: ScanCache | None = None  # made on first use: a cache holds a lock

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its run config (tuner.pkl): a stream does not pickle, the cache need not.
        state = dict(self.__dict__)
        state["verdict"] = self.verdict.shippable()
        state["_cache"] = None
        return state

    @property
    def cache(self) -> ScanCache:
        """Trial dirs unchanged since the last event are not read again."""
        if self._cache is None:
            self._cache = ScanCache()
        return self._cache

    @property
    def event_seconds(self) -> list[float]:
        """What each trial event and the experiment's end cost the run, in seconds."""
        return self.verdict.event_seconds

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        with self.verdict.guarded("diagnosis of a failed trial"):
            storage, path = _experiment_storage(trial, trial.storage.trial_dir_name)
            result = scan_storage(storage, path, workers=1, cache=self.cache)
            findings = [f for f in run_rules(result, LIVE_RULES) if _about(f, trial.trial_id)]
            title = f"{trial.storage.experiment_dir_name}: trial {trial.trial_id} failed"
            # The report file waits for the experiment's end; say where the whole story is.
            if self.verdict.report_path is not None:
                more = f"{os.fspath(self.verdict.report_path)} (when the experiment ends)"
            else:
                more = inspect_command(storage.display(path))
            self.verdict.say(self.verdict.lines(title, findings, more))

    def on_experiment_end(self, trials: list, **info) -> None:
        if not trials:
            return
        ending = sys.exc_info()[1]  # Tune calls this while handling what stops the run
        with self.verdict.guarded("diagnosis of the experiment"):
            storage, path = _experiment_storage(trials[0], None)
            result = scan_storage(storage, path, cache=self.cache)
            if ending is not None:
                merge_logs(result, _exception_log(ending, storage.display(path)))
            findings = run_rules(result, INSPECT_RULES)
            self._finish(result, findings, storage.display(path))

    def _finish(self, result: ScanResult, findings: list, shown_path: str) -> None:
        written = self.verdict.write_report(result, findings)
        name = result.experiments[0].name if result.experiments else shown_path
        lines = self.verdict.lines(name, findings, written or inspect_command(shown_path))
        self.verdict.say(lines)


def _exception_log(error: BaseException, experiment: str) -> LogResult:
    """The exception stopping `Tuner.fit()` (e.g. Ray 2.60's driver error when the memory
    monitor kills a trial's actor), read as the driver's log would show it."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return parse_text_log(text.splitlines(), f"{experiment} (the exception that stopped Tune)")


def _about(finding, trial_id: str) -> bool:
    """A finding of a single-trial scan about that trial (its experiment is the trial dir)."""
    return finding.trial_id in (None, trial_id)


def _experiment_storage(trial, trial_dir: str | None) -> tuple[Storage, str]:
    """The experiment dir (or one trial's dir in it) as the driver sees it right now: what it
    staged locally over what it synced to the storage_path. Paths are the storage's."""
    context = trial.storage
    synced_root = context.experiment_fs_path
    synced = storage_for_filesystem(context.storage_filesystem, synced_root)
    staged_root = context.experiment_driver_staging_path
    overlay = OverlayStorage(LocalStorage(), staged_root, synced, synced_root)
    path = overlay.join(synced_root, trial_dir) if trial_dir else synced_root
    return overlay, path


def __getattr__(name: str) -> Any:
    if name == "DoctorCallback":
        from ray import tune

        cls = type(
            "DoctorCallback",
            (_TuneDiagnosis, tune.Callback),
            {"__module__": __name__, "__doc__": _CALLBACK_DOC},
        )
        globals()[name] = cls  # one class, so pickles of it load back as the same one
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_CALLBACK_DOC = """A Tune callback that prints ray-doctor's diagnosis into the driver's output.

Args:
    report_path: write the JSON report (the `ray-doctor inspect --format json` contract) here
        when the experiment ends. Default: no file; the verdict names the command to run.
    min_severity: the least severe finding printed: "error", "warning" (default) or "info".
    quiet_if_healthy: print nothing when the run has no finding at `min_severity` or above
        (default True).
    stream: where to print (default: the driver's stdout).

It never fails the run: an error inside it is printed as one line and the run goes on.
`event_seconds` holds what each diagnosis cost, in seconds.
"""

__all__ = ["DoctorCallback"]  # noqa: F822 - built on first access by __getattr__
