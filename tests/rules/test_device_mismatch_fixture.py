"""device-mismatch on a real torch error raised inside a Ray 2.60 trial (cpu vs meta)."""

from conftest import experiment_dir, findings_of, inspect_json


def test_real_trial(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_device_mismatch")))
    assert code == 1
    (finding,) = findings_of(report, "device-mismatch")
    assert "cpu and meta" in finding["message"]
    assert "generate.py" in finding["message"], "names the user's frame"


def test_near_miss_other_runtime_error(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_config_correlated")))
    assert not findings_of(report, "device-mismatch")
