"""recovered-after-failure: info about a retry that worked, and what it cost."""

from conftest import experiment_dir, findings_of, inspect_json


def test_fires_with_checkpoint_and_lost_iterations(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_recovered")))
    assert code == 0, "info findings do not fail the default --fail-on error"
    (finding,) = findings_of(report, "recovered-after-failure")
    assert finding["severity"] == "info"
    assert "ConnectionError" in finding["message"]
    assert "restored from checkpoint_000000 (iteration 2)" in finding["message"]
    assert "1 iteration(s) ran again" in finding["message"]
    assert any(e["path"].endswith("result.json") and e["line"] for e in finding["evidence"])


def test_near_miss_failed_for_good(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_retries_exhausted")))
    assert not findings_of(report, "recovered-after-failure")


def test_near_miss_never_failed(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "recovered-after-failure")
