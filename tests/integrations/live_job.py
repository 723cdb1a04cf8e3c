"""The entrypoint of the Ray Job that tests/integrations/test_live.py submits: a Tune sweep
(one trial at a time) in which the second trial raises. `python live_job.py STORAGE_PATH`."""

from __future__ import annotations

import sys

import ray
from ray import tune


def trainable(config):
    for step in range(1, 4):
        if config["lr"] == 0.1 and step == 2:
            raise ValueError("lr=0.1 is too large: loss diverged")
        tune.report({"loss": config["lr"] / step})


if __name__ == "__main__":
    ray.init()  # the job's cluster (RAY_ADDRESS, set by the job manager)
    tuner = tune.Tuner(
        trainable,
        param_space={"lr": tune.grid_search([0.01, 0.1])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(name="live_job", storage_path=sys.argv[1]),
    )
    grid = tuner.fit()
    if grid.errors:
        raise SystemExit(f"{len(grid.errors)} trial(s) failed")
