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


def test_found_without_the_driver_log(fixtures):
    # The experiment state alone records the time budget (a TimeoutStopper in runner_data),
    # and the sweep's own cadence says how long a silence is a hang.
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_trial_stalled")))
    assert code == 0
    (finding,) = findings_of(report, "trial-stalled")
    assert "time budget" in finding["message"]
    assert any("TimeoutStopper" in e["excerpt"] for e in finding["evidence"])


def test_near_miss_trials_a_scheduler_stopped_at_one_rung(fixtures, tmp_path):
    # Copy the real run and make the two healthy trials stop at the hung trial's iteration,
    # as ASHA's rung would: three silent trials at one milestone are a rung, not a hang.
    import shutil

    from ray_doctor.rules import run_rules
    from ray_doctor.scan import scan

    copy = tmp_path / "exp"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_stalled"), copy)
    result = scan(str(copy))
    (experiment,) = result.experiments
    stalled = next(t for t in experiment.trials if t.history.last_iteration == 2)
    for trial in experiment.trials:
        if trial is not stalled:
            trial.history.last_iteration = 2
    experiment.trials.append(stalled)  # a third trial silent at the same rung
    findings = [f for f in run_rules(result) if f.rule == "trial-stalled"]
    assert findings == []
