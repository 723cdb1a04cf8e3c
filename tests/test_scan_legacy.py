"""Layouts of older Ray: Tune before the 2.7 storage rewrite, and Train V1 TorchTrainer dirs."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, experiment_dir, findings_of, inspect_json

from ray_doctor.model import Layout, TrialStatus
from ray_doctor.scan import scan

LEGACY = {m["scenario"]: m for m in json.loads((FIXTURES / "legacy" / "manifest.json").read_text())}


@pytest.mark.parametrize("scenario", sorted(LEGACY))
def test_statuses_and_failures_match_what_old_ray_wrote(fixtures, scenario):
    facts = LEGACY[scenario]["what_happened"]
    result = scan(str(experiment_dir(fixtures, scenario)))
    (exp,) = result.experiments
    expected_layout = Layout.TRAIN_V1 if "train_v1" in scenario else Layout.TUNE_LEGACY
    assert exp.layout == expected_layout
    by_id = {t.trial_id: t for t in exp.trials}
    for trial_facts in facts["trials"]:
        trial = by_id[trial_facts["trial_id"]]
        assert trial.status.value == trial_facts["status"]
        assert trial.name == trial_facts["trial_dirname"]
        assert trial.num_failures == trial_facts["num_failures"]
        assert len(trial.failures) == len(trial_facts.get("error_txt_failure_headers", []))
        if trial.failures:
            assert trial.failures[-1].exc_type == trial_facts["error_type"]
        assert sorted(c.name for c in trial.checkpoints if c.exists) == sorted(
            trial_facts["checkpoint_dirs"]
        )
        assert trial.history.rows == trial_facts["result_json_rows"]
    assert not result.all_errors


def test_pre_2_7_state_with_checkpoints_key_reads_last_result(fixtures):
    result = scan(str(experiment_dir(fixtures, "ray2_6_tune_error")))
    (exp,) = result.experiments
    assert exp.state_file and exp.layout == Layout.TUNE_LEGACY
    finished = [t for t in exp.trials if t.status == TrialStatus.TERMINATED]
    assert finished and all(t.last_result.get("training_iteration") for t in finished)


def test_retries_exhausted_on_ray_2_6(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "ray2_6_tune_error")))
    assert code == 1
    (finding,) = findings_of(report, "retries-exhausted")
    assert "failed 2 times with max_failures=1" in finding["message"]
    assert report["target"]["layout"] == "tune-legacy"


@pytest.mark.parametrize(
    "scenario", ["ray2_6_train_v1_error", "ray2_46_train_v1_error", "train_v1_error"]
)
def test_train_v1_rank_error_is_unwrapped(fixtures, scenario):
    code, report = inspect_json(str(experiment_dir(fixtures, scenario)))
    assert code == 1
    assert report["target"]["layout"] == "train-v1"
    (trial,) = report["trials"]
    assert trial["name"].startswith("TorchTrainer_")
    (finding,) = findings_of(report, "trial-error")
    assert "RuntimeError" in finding["message"] or "ValueError" in finding["message"]
    assert "RayTaskError" not in finding["message"].split(":")[0]


@pytest.mark.parametrize(
    "scenario", ["ray2_6_tune_healthy", "ray2_6_train_v1_healthy", "ray2_46_train_v1_healthy"]
)
def test_healthy_old_runs_are_clean(fixtures, scenario):
    code, report = inspect_json(str(experiment_dir(fixtures, scenario)))
    assert code == 0
    assert set(t["status"] for t in report["trials"]) == {"TERMINATED"}
