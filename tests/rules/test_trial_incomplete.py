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
