"""The stage runner: the child process of `ray-doctor smoke` that imports Ray.

`python -m ray_doctor.smoke._runner OPTIONS.json` connects to (or starts) Ray, runs the
selected stages and writes one JSON line per event to `<work_dir>/events.jsonl` as it goes,
so the parent can show progress, enforce `--timeout` and still report what finished when
it has to stop the run. SIGINT or SIGTERM end the run through `ray.shutdown()`.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ray_doctor.smoke._compat import RayApiMissing, detect, limitation, missing_ray_name, pieces_for
from ray_doctor.smoke._model import SmokeOptions, StageResult, StageStatus

EVENTS = "events.jsonl"
CHILD_MARGIN_S = 3.0  # this interpreter's start-up, and the last events after the stages
OPTIONS = "options.json"


class Events:
    """Append-only JSON lines; each is flushed at once (the parent tails the file). Stages
    run in threads, so writes take a lock."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._lock = threading.Lock()

    def emit(self, kind: str, **data: Any) -> None:
        line = json.dumps({"type": kind, "at": time.time(), **data}, default=str) + "\n"
        with self._lock:
            self._file.write(line)

    def stage(self, result: StageResult) -> None:
        self.emit("stage", **result.to_json())


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def timed(events: Events, name: str, fn, *args):
    """Run a stage function, announcing it first; a bug in it becomes an ERROR stage."""
    from ray_doctor.smoke._probes import error_text

    events.emit("start", stage=name)
    started = time.monotonic()
    try:
        result = fn(*args)
    except KeyboardInterrupt:
        raise
    except RayApiMissing as exc:  # this Ray lacks what the stage needs: ray-doctor's limit
        result = StageResult(name, StageStatus.ERROR, message=limitation(str(exc)))
        result.details["missing_api"] = exc.piece
    except Exception as exc:
        text = error_text(exc)
        missing = missing_ray_name(text)
        if missing is not None:  # a name ray-doctor used that this Ray does not have
            import ray

            why = f"Ray {ray.__version__} has no {missing}"
            result = StageResult(name, StageStatus.ERROR, message=limitation(why))
            result.details["missing_api"] = missing
        else:
            last = text.splitlines()[-1]
            result = StageResult(
                name, StageStatus.ERROR, message=f"ray-doctor could not run this stage: {last}"
            )
        result.details["traceback"] = text
    if isinstance(result, StageResult) and not result.duration_s:
        result.duration_s = time.monotonic() - started
    return result


class Background:
    """A stage in a daemon thread: the Tune and Train stages overlap (Train's controller
    starts without CPUs while the trial runs), and Ctrl-C never waits on either."""

    def __init__(self, fn, *args) -> None:
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._thread.start()

    def _run(self, fn, args) -> None:
        self._box["value"] = fn(*args)

    def result(self):
        while self._thread.is_alive():
            self._thread.join(0.5)  # short joins: a KeyboardInterrupt gets through
        return self._box.get("value")


def run(options: SmokeOptions, events: Events) -> None:
    from ray_doctor.smoke.stages import _common, cluster, collective, device, environment, port
    from ray_doctor.smoke.stages import relaunch as relaunch_stage

    # The parent stops this process at --timeout; stages end a little earlier, so what they
    # found is reported rather than cut off.
    ctx = _common.Context(options, deadline=time.monotonic() + options.timeout_s - CHILD_MARGIN_S)
    selected = set(options.stages)
    cluster = timed(events, "cluster", cluster.connect, ctx)
    events.stage(cluster)
    if cluster.status != StageStatus.PASS:
        return
    events.emit(
        "ray", version=cluster.details.get("ray_version"), address=cluster.details.get("address")
    )
    _common.ship_probes_by_value()
    # Importing Tune and Train takes seconds: it is part of their stages' time.
    for name in ("device", "collective"):
        if name in selected or (name == "device" and "checkpoint" in selected):
            events.emit("start", stage=name)
    _common.import_ray_libraries(options)
    pieces = pieces_for(selected)
    if pieces:
        ctx.api = detect(pieces)
        events.emit("api", api=ctx.api.to_json())
    probes = None
    if {"port", "environment"} & selected:
        probes = _common.start_node_probes(ctx)
    _common.check_storage(ctx)
    tune_job = train_job = None
    if {"device", "checkpoint"} & selected:
        tune_job = Background(timed, events, "device", device.tune_stages, ctx)
    # Train V1 runs its trainer through Tune, whose driver state (the trainable registry) is
    # not thread-safe: two runs started at once in this process break each other (Ray 2.9:
    # "dictionary changed size during iteration"). There the Train run waits for the Tune one.
    train_after_tune = tune_job is not None and ctx.api is not None and ctx.api.train == "v1"
    if "collective" in selected and not train_after_tune:
        train_job = Background(timed, events, "collective", collective.collective_stage, ctx)
    if tune_job is not None:
        results = tune_job.result()
        if "collective" in selected and train_job is None:
            train_job = Background(timed, events, "collective", collective.collective_stage, ctx)
        if isinstance(results, StageResult):  # one ERROR result for both
            results = (results, StageResult("checkpoint", results.status, message=results.message))
        for result in results:
            if result.name in selected:
                events.stage(result)
    if probes is not None:
        gathered = _common.gather_probes(ctx, probes)
        if "port" in selected:
            events.stage(timed(events, "port", port.port_stage, ctx, gathered))
        if "environment" in selected:
            environment, facts = environment.environment_stage(ctx, gathered)
            events.emit("environment", environment=facts)
            events.stage(environment)
    if train_job is not None:
        events.stage(train_job.result())
    if "relaunch" in selected:
        facts = timed(events, "relaunch", relaunch_stage.relaunch_run, ctx)
        if isinstance(facts, StageResult):
            events.stage(facts)
        else:
            events.emit("relaunch", facts=facts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = SmokeOptions.from_json(json.loads(Path(argv[0]).read_text()))
    events = Events(Path(options.work_dir) / EVENTS)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        run(options, events)
        events.emit("done")
        return 0
    except KeyboardInterrupt:
        events.emit("interrupted")
        return 130
    finally:
        if "ray" in sys.modules:
            import ray

            if ray.is_initialized():
                ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
