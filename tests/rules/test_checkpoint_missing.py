"""checkpoint-missing: nothing to resume from, or a snapshot naming a checkpoint that is gone."""

import json
import shutil

import pytest
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


def test_near_miss_file_missing_from_tunes_own_restore_copy():
    # Ray 0.8's restore_from_object unpacks the checkpoint it shipped into a temp dir of its
    # own; a file missing there was left out by Tune (ray #8581), not deleted by anyone.
    text = (
        "ray.exceptions.RayTaskError(FileNotFoundError): ray::DQN.restore_from_object() "
        "(pid=37045, ip=192.168.100.2)\n"
        '  File "/usr/lib/python3.7/site-packages/ray/tune/trainable.py", line 403, in restore\n'
        '    with open(checkpoint_path + ".tune_metadata", "rb") as f:\n'
        "FileNotFoundError: [Errno 2] No such file or directory: '/root/ray_results/exp/"
        "DQN_0_2020-05-24_12-18-16/tmpmtsto5e8restore_from_object/checkpoint_3059/"
        ".tune_metadata'\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "checkpoint-missing")
    assert findings_of(report, "trial-error"), "reported as the error it is, with its text"
    gone = text.replace("tmpmtsto5e8restore_from_object/", "")
    _, report = inspect_json("-", stdin=gone)
    assert findings_of(report, "checkpoint-missing"), "a checkpoint of the run itself is gone"


@pytest.mark.parametrize(
    "line",
    [
        # lightning_fabric/plugins/io/torch_io.py (Lightning 1.9-2.x), GraphDreamer #6 as posted
        "FileNotFoundError: Checkpoint file not found: examples/gd-if/blue_jay/ckpts/last.ckpt",
        # pytorch_lightning's checkpoint connector before it
        "FileNotFoundError: Checkpoint at lightning_logs/version_3/checkpoints/last.ckpt not "
        "found. Aborting training.",
    ],
)
def test_lightning_resume_from_a_path_that_is_not_there(line):
    code, report = inspect_json("-", stdin=line + "\n")
    assert code == 1
    assert report["findings"][0]["rule"] == "checkpoint-missing"
