"""Real Ray runs with ray-doctor's callbacks, made once per test session (one Ray instance).

Run as a script by the `callback_runs` fixture: `python callback_runs.py OUT_DIR RAY_TEMP`. In one
private Ray instance (its own temp dir, the memory monitor made strict as the fixtures do) it
runs, one after another:

- `failing`: a Tune sweep, one trial at a time: a healthy trial, one that raises, one that
  grows until Ray's memory monitor kills it (Ray 2.60's Tune driver then fails with a
  RuntimeError, as tests/fixtures' tune_oom_memory_monitor shows); DoctorCallback with a
  JSON report path.
- `healthy`: a sweep whose trials all finish; DoctorCallback with its defaults.
- `broken`: the healthy and the raising trial again, with a DoctorCallback whose scan raises:
  the sweep must end exactly as without it.
- `train`: a Train V2 TorchTrainer (2 workers, gloo) whose rank 1 raises, with the Train
  DoctorCallback.

Each section prints `=== <name>` first and `RESULT <json>` (what the run itself returned) last.
"""

from __future__ import annotations

import json
import os
import sys
import time

import ray
from ray import tune

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from smoke_runs import start_local_ray

from ray_doctor.integrations import tune as tune_integration
from ray_doctor.integrations.train import DoctorCallback as TrainDoctorCallback
from ray_doctor.integrations.tune import DoctorCallback

OOM_CAP_MB = int(os.environ.get("RDTEST_OOM_CAP_MB", "6000"))


def trainable(config):
    for step in range(1, 4):
        if config["kind"] == "raise" and step == 2:
            raise ValueError("lr=0.1 is too large: loss diverged")
        if config["kind"] == "oom" and step == 2:
            hog = []
            for _ in range(OOM_CAP_MB // 100):
                hog.append(b"x" * (100 * 1024 * 1024))  # touches the pages
                time.sleep(0.1)
            time.sleep(10)
        tune.report({"loss": 1.0 / step, "step": step})


def sweep(out: str, name: str, kinds: list[str], callback) -> None:
    print(f"=== {name}", flush=True)
    tuner = tune.Tuner(
        trainable,
        param_space={"kind": tune.grid_search(kinds)},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(name=name, storage_path=out, callbacks=[callback]),
    )
    raised = None
    try:
        grid = tuner.fit()
    except Exception as exc:  # Ray 2.60's driver fails when the memory monitor kills a trial
        raised = type(exc).__name__
        grid = tune.Tuner.restore(os.path.join(out, name), trainable).get_results()
    outcome = {
        "raised": raised,
        "errors": grid.num_errors,
        "terminated": grid.num_terminated,
        "trials": {
            r.config["kind"]: {
                "error": type(r.error).__name__ if r.error else None,
                "loss": r.metrics.get("loss"),
                "step": r.metrics.get("step"),
            }
            for r in grid
            if r.config  # a trial the driver never started, after a failed fit(), has none
        },
        "event_seconds": callback.event_seconds,
    }
    print("RESULT " + json.dumps(outcome), flush=True)


def train_loop(config):
    import ray.train
    import ray.train.torch
    import torch.nn as nn

    rank = ray.train.get_context().get_world_rank()
    ray.train.torch.prepare_model(nn.Linear(4, 2))
    for epoch in range(1, 4):
        if rank == 1 and epoch == 2:
            raise ValueError("Found NaN in input batch on rank 1 (epoch 2, step 0)")
        ray.train.report({"epoch": epoch})


def train_run(out: str) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    print("=== train", flush=True)
    trainer = TorchTrainer(
        train_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="train", storage_path=out, callbacks=[TrainDoctorCallback()]),
    )
    try:
        trainer.fit()
        raised = None
    except Exception as exc:
        raised = type(exc).__name__
    time.sleep(3)  # the controller's output reaches the driver through Ray's log monitor
    print("RESULT " + json.dumps({"raised": raised}), flush=True)


def main(out: str, ray_temp_dir: str) -> None:
    start_local_ray(ray_temp_dir)
    try:
        report = os.path.join(out, "failing-report.json")
        sweep(out, "failing", ["ok", "raise", "oom"], DoctorCallback(report_path=report))
        sweep(out, "healthy", ["ok", "ok2"], DoctorCallback())

        def broken_scan(*args, **kwargs):
            raise RuntimeError("scan exploded (test)")

        tune_integration.scan_storage = broken_scan
        sweep(out, "broken", ["ok", "raise"], DoctorCallback())
        train_run(out)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
