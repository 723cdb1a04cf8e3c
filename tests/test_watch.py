"""inspect --watch: incremental passes, and a live Ray Tune sweep followed as it runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import experiment_dir, run_cli, validate
from smoke_runs import start_local_ray

from ray_doctor.scan import ScanCache, scan


def test_each_pass_reads_only_what_changed(fixtures: Path, tmp_path: Path) -> None:
    experiment = tmp_path / "tune_trial_error"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_error"), experiment)
    cache = ScanCache()

    first = scan(str(experiment), cache=cache)
    assert cache.read == 4 and cache.reused == 0  # three trial dirs and the state

    second = scan(str(experiment), cache=cache)
    assert cache.read == 0 and cache.reused == 4
    assert [t.status for t in second.experiments[0].trials] == [
        t.status for t in first.experiments[0].trials
    ]

    # One trial reports again: only its dir is read again, and the new row counts.
    trial = next(t for t in first.experiments[0].trials if t.status.value == "TERMINATED")
    result_json = Path(trial.path) / "result.json"
    last = result_json.read_text().splitlines()[-1]
    row = json.loads(last)
    row["training_iteration"] += 1
    with open(result_json, "a") as out:
        out.write(json.dumps(row) + "\n")

    third = scan(str(experiment), cache=cache)
    assert cache.read == 1 and cache.reused == 3
    grown = third.experiments[0].trial(trial.trial_id)
    assert grown.history.rows == trial.history.rows + 1
    assert grown.iterations == row["training_iteration"]


def test_watch_ends_at_once_on_a_finished_experiment(fixtures: Path) -> None:
    proc = run_cli(
        "inspect", "--watch", "--interval", "0.2", "--format", "json",
        str(experiment_dir(fixtures, "tune_trial_error")),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "error trial-error" in proc.stderr and "the experiment ended" in proc.stderr
    assert [f["rule"] for f in validate(json.loads(proc.stdout))["findings"]] == ["trial-error"]


def test_watch_rejects_stdin() -> None:
    proc = run_cli("inspect", "--watch", "-", stdin="")
    assert proc.returncode == 2 and "not standard input" in proc.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_watch_follows_a_live_tune_sweep(tmp_path: Path, monkeypatch) -> None:
    """A real sweep writes into a temp dir while `inspect --watch` follows it: the failing
    trial is reported while the other still runs, and the watcher ends with the sweep."""
    ray = pytest.importorskip("ray")
    from ray import tune

    # The driver syncs trial results and the experiment state to storage_path every second.
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "1")
    storage = tmp_path / "ray_results"
    experiment = storage / "live_sweep"
    report_file = tmp_path / "report.json"
    with open(report_file, "w") as stdout:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "ray_doctor", "inspect", "--watch", "--interval", "0.5",
             "--format", "json", str(experiment)],
            stdout=stdout, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
    lines: list[str] = []
    # The watcher's first trial-error line is marked on disk, so the healthy trial can keep
    # running until it is out: "reported live" is then an ordering, whatever the load.
    reported = tmp_path / "reported-live"

    def read_stderr() -> None:
        for line in watcher.stderr:
            lines.append(line)
            if "error trial-error" in line:
                reported.touch()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()

    def train(config):
        step = 0
        while True:
            step += 1
            if config["lr"] == 0.1 and step == 3:
                raise ValueError("lr=0.1 is too large: loss diverged")
            seen = reported.exists()
            tune.report({"loss": config["lr"] / step, "seen_report": seen})
            if seen or step >= 600:  # 600 x 0.5 s: a hang guard, not a budget
                return
            time.sleep(0.5)

    temp_dir = tempfile.mkdtemp(prefix="rdw-", dir="/tmp")  # short: Ray's socket paths
    try:
        start_local_ray(temp_dir)
        tuner = tune.Tuner(
            train,
            param_space={"lr": tune.grid_search([0.01, 0.1])},
            run_config=tune.RunConfig(name="live_sweep", storage_path=str(storage)),
        )
        results = tuner.fit()
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    try:
        code = watcher.wait(timeout=180)  # ends by itself once the sweep has ended
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    reader.join(timeout=10)

    assert code == 1, lines
    assert any("error trial-error" in line for line in lines), lines
    # Reported live: the healthy trial was still running when the watcher reported.
    healthy = [r for r in results if r.error is None]
    assert healthy and healthy[0].metrics["seen_report"], lines
    assert any("the experiment ended" in line for line in lines)
    report = validate(json.loads(report_file.read_text()))
    assert sorted(t["status"] for t in report["trials"]) == ["ERROR", "TERMINATED"]
    assert [f["rule"] for f in report["findings"]] == ["trial-error"]


class _Clock:
    """Time that passes only when the watch sleeps: the bound is tested without waiting it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_watch_ends_when_the_driver_is_gone(fixtures: Path, tmp_path: Path) -> None:
    # A real Ray 2.60 sweep whose driver was SIGKILLed: its trials stay RUNNING on storage
    # forever. Nothing changes for longer than the sweep's own cadence allows, no Ray process
    # runs: the watch ends with the run judged as stopped.
    from ray_doctor.watch import quiet_bound, watch

    copy = tmp_path / "tune_driver_killed"
    shutil.copytree(experiment_dir(fixtures, "tune_driver_killed"), copy)
    clock = _Clock()
    last = watch(str(copy), interval=2.0, sleep=clock.sleep, clock=clock, ray_here=lambda: False)
    assert last.stopped and "the driver stopped" in last.stopped
    assert quiet_bound(last.cadence) <= clock.now < quiet_bound(last.cadence) + 3 * 2.0
    rules = [f.rule for f in last.report.findings]
    assert "trial-incomplete" in rules, rules


def test_watch_keeps_waiting_while_ray_runs_here(fixtures: Path, tmp_path: Path) -> None:
    from ray_doctor.watch import quiet_bound, watch

    copy = tmp_path / "tune_driver_killed"
    shutil.copytree(experiment_dir(fixtures, "tune_driver_killed"), copy)
    clock = _Clock()
    passes = []

    def stop_after_a_while(current) -> None:
        passes.append(current)
        if clock.now > 3 * quiet_bound(current.cadence):
            raise KeyboardInterrupt  # the user's Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        watch(
            str(copy), interval=2.0, sleep=clock.sleep, clock=clock,
            ray_here=lambda: True, on_pass=stop_after_a_while,
        )  # fmt: skip
    assert not any(p.stopped for p in passes)
