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

from ray_doctor.smoke._compat import RayApiMissing, detect, limitation, missing_ray_name
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
    """The selected stages, by their phase (smoke/stages/__init__.py)."""
    from ray_doctor.smoke.stages import BACKGROUND, CONNECT, LAST, PROBES, _common, registry

    # The parent stops this process at --timeout; stages end a little earlier, so what they
    # found is reported rather than cut off.
    ctx = _common.Context(
        options, deadline=time.monotonic() + options.timeout_s - CHILD_MARGIN_S, emit=events.emit
    )
    selected = set(options.stages)
    chosen = [s for s in registry().values() if s.run is not None and s.wanted(selected)]
    phase = {
        name: [s for s in chosen if s.phase == name] for name in (CONNECT, BACKGROUND, PROBES, LAST)
    }
    for stage in phase[CONNECT]:
        result = timed(events, stage.name, stage.run, ctx)
        events.stage(result)
        if result.status != StageStatus.PASS:
            return
    _common.ship_probes_by_value()
    # Importing Tune and Train takes seconds: it is part of their stages' time.
    for stage in phase[BACKGROUND]:
        events.emit("start", stage=stage.name)
    pieces = frozenset().union(*(s.api for s in chosen))
    _common.import_ray_libraries(pieces)
    if pieces:
        ctx.api = detect(pieces)
        events.emit("api", api=ctx.api.to_json())
    probes = _common.start_node_probes(ctx) if phase[PROBES] else None
    _common.check_storage(ctx)
    jobs = _start_background(phase[BACKGROUND], ctx, events)

    def report(stage) -> None:
        results = jobs[stage.name].result()
        if isinstance(results, StageResult):
            # One result (an ERROR) for every stage the run reports.
            copies = (
                StageResult(n, results.status, message=results.message) for n in stage.reports
            )
            results = (results, *copies)
        for result in results:
            if result.name in selected:
                events.stage(result)

    for stage in phase[BACKGROUND]:
        if stage.before_probes:
            report(stage)
    if probes is not None:
        gathered = _common.gather_probes(ctx, probes)
        for stage in phase[PROBES]:
            events.stage(timed(events, stage.name, stage.run, ctx, gathered))
    for stage in phase[BACKGROUND]:
        if not stage.before_probes:
            report(stage)
    for stage in phase[LAST]:
        result = timed(events, stage.name, stage.run, ctx)
        if result is not None:
            events.stage(result)


def _start_background(stages, ctx, events) -> dict[str, Background]:
    """Each stage's run in a thread. Runs that go through Tune's driver on this Ray
    (`Stage.tune_driver`) go one after another: Tune's driver state (its trainable registry)
    is not thread-safe, and two such runs started at once break each other (Ray 2.9, Train
    V1: "dictionary changed size during iteration")."""
    jobs: dict[str, Background] = {}
    previous: Background | None = None
    for stage in stages:
        after = previous if stage.tune_driver(ctx.api) else None
        jobs[stage.name] = Background(_after, after, timed, events, stage.name, stage.run, ctx)
        if stage.tune_driver(ctx.api):
            previous = jobs[stage.name]
    return jobs


def _after(previous: Background | None, fn, *args):
    if previous is not None:
        previous.result()
    return fn(*args)


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
