"""checkpoint-missing: nothing to resume from, or a snapshot naming a checkpoint that is gone."""

import json
import shutil

from conftest import experiment_dir, findings_of, inspect_json


def test_retries_without_a_checkpoint_started_over(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_no_checkpoint")))
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-missing")
    assert finding["severity"] == "warning"
    assert "never saved a checkpoint" in finding["message"]
    assert "every retry started over" in finding["message"]
    assert "tune.get_checkpoint()" in finding["fix"]


def test_train_v2_snapshot_names_a_deleted_checkpoint(fixtures, tmp_path):
    run = tmp_path / "train_v2_healthy"
    shutil.copytree(experiment_dir(fixtures, "train_v2_healthy"), run)
    snapshot = json.loads((run / "checkpoint_manager_snapshot.json").read_text())
    gone = snapshot["latest_checkpoint_result"]["checkpoint_dir_name"]
    shutil.rmtree(run / gone)  # a hand-deleted checkpoint: the snapshot still names it
    code, report = inspect_json(str(run))
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-missing")
    assert gone in finding["message"]
    assert "RunConfig(name=...)" in finding["fix"]


def test_near_miss_checkpoints_deleted_by_num_to_keep(fixtures):
    # tune_healthy keeps 2 checkpoints per trial; older ones are gone by design.
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "checkpoint-missing")


def test_near_miss_failure_with_checkpoints_to_resume_from(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_retries_exhausted")))
    assert not findings_of(report, "checkpoint-missing")
