"""trial-incomplete: trials left PENDING / RUNNING when the driver stopped."""

from conftest import experiment_dir, findings_of, inspect_json


def test_fires_when_the_driver_was_killed(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_driver_killed")))
    assert code == 1
    (finding,) = findings_of(report, "trial-incomplete")
    unfinished = [t for t in report["trials"] if t["status"] in ("RUNNING", "PENDING")]
    assert (
        f"{len(unfinished)} of {len(report['trials'])} trials never finished" in finding["message"]
    )
    assert "have a checkpoint to resume from" in finding["message"]
    assert all(e["path"].endswith(".json") for e in finding["evidence"])
    assert "resume_unfinished=True" in finding["fix"]


def test_near_miss_failed_trials_are_not_unfinished(fixtures):
    # Tune logs "Trials did not complete" for errored trials too; they are not incomplete.
    base = fixtures / "tune_corrupt_checkpoint"
    _, report = inspect_json(
        str(experiment_dir(fixtures, "tune_corrupt_checkpoint")), "--logs", str(base / "driver.log")
    )
    assert not findings_of(report, "trial-incomplete")


def test_near_miss_finished_sweep(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "trial-incomplete")


def test_a_time_budget_that_ended_trials_before_they_started(fixtures):
    # Real Ray 2.60: both trials asked for a GPU on a CPU-only machine and waited until
    # time_budget_s=20 ended the run; Tune wrote them TERMINATED with no start time.
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_time_budget_pending")))
    assert code == 1
    (finding,) = findings_of(report, "trial-incomplete")
    assert "2 TERMINATED before starting" in finding["message"]
    assert "time budget" in finding["message"]
    assert any("TimeoutStopper" in e["excerpt"] for e in finding["evidence"])


def test_trials_a_stop_all_stopper_ended_before_they_ran(fixtures):
    # Real Ray 2.60: a Stopper of the user's own whose stop_all() is True from the start.
    base = fixtures / "tune_stopper_stop_all"
    code, report = inspect_json(
        str(experiment_dir(fixtures, "tune_stopper_stop_all")), "--logs", str(base / "driver.log")
    )
    assert code == 1
    (finding,) = findings_of(report, "trial-incomplete")
    assert "own stopper ended the run" in finding["message"]
    assert "The driver stopped" not in finding["message"]
    assert any("stop_all" in e["excerpt"] for e in finding["evidence"])
    # Ray's own race in the same log (a temp file renamed away while it synced the state,
    # written again right after) is no storage failure and no failure of the run.
    assert "Failed to open local file" in (base / "driver.log").read_text()
    assert [f["rule"] for f in report["findings"]] == ["trial-incomplete"]
    assert not [r for f in report["findings"] for r in f["related"]]


def test_says_how_many_unfinished_trials_can_resume(fixtures):
    # Two trials left RUNNING, one of them with a checkpoint: the count and its verb agree.
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_oom_memory_monitor")))
    assert code == 1
    (finding,) = findings_of(report, "trial-incomplete")
    with_checkpoint = [t for t in report["trials"] if t["last_checkpoint"]]
    assert len(with_checkpoint) == 1
    assert "1 of them has a checkpoint to resume from." in finding["message"]
