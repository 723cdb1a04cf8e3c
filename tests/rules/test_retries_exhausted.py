"""retries-exhausted: fires only when max_failures was set and ran out."""

from conftest import experiment_dir, findings_of, inspect_json


def test_fires_when_every_retry_failed(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_retries_exhausted")))
    assert code == 1
    (finding,) = findings_of(report, "retries-exhausted")
    assert "failed 3 times with max_failures=2" in finding["message"]
    assert "Every attempt failed the same way" in finding["message"]
    assert "RuntimeError: Failed to read shard 7" in finding["message"]
    headers = [e for e in finding["evidence"] if e["excerpt"].startswith("Failure #")]
    assert len(headers) == 3
    # One failure, one headline: the generic trial-error is folded into this finding.
    assert not findings_of(report, "trial-error")
    assert [r["rule"] for r in finding["related"]] == ["trial-error"]


def test_near_miss_no_retries_configured(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_trial_error")))
    assert not findings_of(report, "retries-exhausted")


def test_near_miss_retries_that_worked(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_recovered")))
    assert not findings_of(report, "retries-exhausted")
