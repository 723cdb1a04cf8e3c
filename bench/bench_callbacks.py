#!/usr/bin/env python
"""What the Tune DoctorCallback costs the run it sits in: seconds per trial event.

Builds the same replicated Ray 2.60 experiment as bench_inspect.py (default 1,000 trials x
300 iterations), marks some trials as errored the way Ray does (an `error.txt` in the trial
dir), and calls the callback's own methods the way Tune's driver loop calls them: one
`on_trial_error` per errored trial, then `on_experiment_end`. The trial objects carry what Tune's
`Trial.storage` carries (the storage filesystem, the experiment path, the driver's staging
dir). Ray's runtime is not started: this is the callback's cost alone.

    python bench/bench_callbacks.py [--trials 1000] [--iterations 300] [--errored 20]
"""

from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench_inspect import build  # noqa: E402

from ray_doctor.integrations.tune import _TuneDiagnosis  # noqa: E402

ERROR_TEXT = (
    "Failure # 1 (occurred at 2026-11-22_06-27-08)\n"
    "ray::ImplicitFunc.train() (pid=1, ip=10.0.0.1, actor_id=00, repr=train_model)\n"
    '  File "/home/ray/train.py", line 255, in train_model\n'
    '    raise ValueError("lr=0.1 is too large: loss diverged")\n'
    "ValueError: lr=0.1 is too large: loss diverged\n"
)


@dataclass
class FakeStorage:
    """The attributes of Tune's StorageContext the callback reads."""

    storage_filesystem: object
    experiment_fs_path: str
    experiment_driver_staging_path: str
    experiment_dir_name: str
    trial_dir_name: str | None = None


@dataclass
class FakeTrial:
    trial_id: str
    storage: FakeStorage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--errored", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    import pyarrow.fs as pafs

    exp = build(args.workdir / "speed" / "bench_exp", args.trials, args.iterations)
    staging = args.workdir / "callback_staging"  # the driver's staging dir: empty here
    staging.mkdir(parents=True, exist_ok=True)
    trial_dirs = sorted(p for p in exp.iterdir() if p.is_dir())
    trials = []
    for trial_dir in trial_dirs[: args.errored]:
        (trial_dir / "error.txt").write_text(ERROR_TEXT)
        storage = FakeStorage(
            pafs.LocalFileSystem(), str(exp), str(staging), exp.name, trial_dir.name
        )
        trial_id = re.search(r"[0-9a-f]{5}_\d{5}", trial_dir.name)[0]
        trials.append(FakeTrial(trial_id, storage))
    callback = _TuneDiagnosis(stream=io.StringIO())
    try:
        for trial in trials:
            callback.on_trial_error(0, [], trial)
        started = time.perf_counter()
        callback.on_experiment_end(trials)
        end = time.perf_counter() - started
    finally:
        for trial_dir in trial_dirs[: args.errored]:
            (trial_dir / "error.txt").unlink()
    events = callback.event_seconds[:-1]
    print(f"{args.trials} trials x {args.iterations} iterations, {len(events)} trial errors")
    print(
        f"on_trial_error: median {statistics.median(events) * 1000:.1f} ms, "
        f"max {max(events) * 1000:.1f} ms"
    )
    print(f"on_experiment_end: {end:.2f} s (reads the whole experiment once)")
    printed = callback.verdict.stream.getvalue().splitlines()
    print(f"verdict lines printed: {len(printed)}; the last: {printed[-1] if printed else ''}")


if __name__ == "__main__":
    main()
