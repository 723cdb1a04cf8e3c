"""trial-stalled: a hung trial hidden by Tune's time budget (real Ray 2.60 run)."""

from conftest import experiment_dir, findings_of, inspect_json


def test_hung_trial_behind_its_siblings(fixtures):
    base = fixtures / "tune_trial_stalled"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_trial_stalled")), "--logs", str(base / "driver.log")
    )
    assert code == 0, "a warning: nothing errored"
    (finding,) = findings_of(report, "trial-stalled")
    assert "stopped reporting after iteration 2" in finding["message"]
    assert "time budget" in finding["message"]
    assert any("Reached timeout" in e["excerpt"] for e in finding["evidence"])
    assert "py-spy dump" in finding["fix"]


def test_near_miss_trials_that_finished_at_different_times(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "trial-stalled")


def test_near_miss_running_trials_that_reported_recently(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_driver_killed")))
    assert not findings_of(report, "trial-stalled")
