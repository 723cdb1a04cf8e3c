"""config-correlated-failures: failures that concentrate in a hyper-parameter region."""

from conftest import experiment_dir, findings_of, inspect_json


def test_batch_size_threshold_with_counts(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_config_correlated")))
    assert code == 1
    (finding,) = findings_of(report, "config-correlated-failures")
    assert finding["severity"] == "warning"
    assert (
        "4 of 4 trials with batch_size >= 512 failed (RuntimeError x4), 0 of 4 outside"
        in finding["message"]
    )


def test_near_miss_one_failure_is_not_a_pattern(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_trial_error")))
    assert not findings_of(report, "config-correlated-failures")


def test_near_miss_all_healthy(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "config-correlated-failures")
