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


def test_pbt_exploit_of_a_checkpoint_num_to_keep_deleted(fixtures):
    # Real Ray 2.60: PBT told one trial to restore another's checkpoint, which
    # CheckpointConfig(num_to_keep=2) had deleted by then.
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_pbt_checkpoint_gone")))
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-missing")
    (errored,) = [t for t in report["trials"] if t["status"] == "ERROR"]
    assert finding["trial_id"] == errored["trial_id"]
    message = finding["message"]
    assert "does not exist on storage anymore" in message
    owner = message.split("The checkpoint is trial ")[1].split("'s")[0]
    assert owner != errored["trial_id"], "names the trial the checkpoint came from"
    missing = message.split("/checkpoint_")[1][:6]
    kept = message.split(f"trial {owner} keeps ")[1].split(":")[0]
    assert f"checkpoint_{missing}" not in kept and "checkpoint_" in kept
    assert "num_to_keep" in finding["fix"] and "perturbation_interval" in finding["fix"]


def test_a_restore_of_its_own_deleted_checkpoint_names_no_other_trial():
    text = (
        "ValueError: Could not recover from checkpoint as it does not exist on storage anymore. "
        "Got storage fs type `local` and path: /home/ray/ray_results/exp/"
        "train_model_eec2b_00003_3_lr=0.0500_2026-11-26_07-35-20/checkpoint_000008\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "checkpoint-missing")
    assert "The checkpoint is trial" not in finding["message"]


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


def _trial_error_replaced(fixtures, tmp_path, last_lines: str):
    """tune_trial_error with its errored trial's error.txt ending in `last_lines` instead."""
    run = tmp_path / "tune_trial_error"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_error"), run)
    (error,) = run.glob("*/error.txt")
    head = error.read_text().rsplit('  File "/home/ray/fixture_jobs/generate.py", line 255', 1)[0]
    error.write_text(head + last_lines)
    return run


def test_a_trial_whose_code_loads_a_weights_file_that_is_not_there(fixtures, tmp_path):
    run = _trial_error_replaced(
        fixtures,
        tmp_path,
        '  File "/home/ray/fixture_jobs/generate.py", line 255, in before_report\n'
        '    model.load_state_dict(torch.load("ckpt/best_model.pth"))\n'
        "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/best_model.pth'\n",
    )
    code, report = inspect_json(str(run))
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-missing")
    assert finding["trial_id"] == "b0523_00002"
    assert "ckpt/best_model.pth" in finding["message"]
    # The fix is about where the path resolves, not about Tune's own checkpoint records.
    assert "relative path" in finding["fix"] and "trial dir" in finding["fix"]
    assert report["findings"][0]["rule"] == "checkpoint-missing"


@pytest.mark.parametrize(
    "missing",
    [
        "processed/data.pt",  # PyG's processed dataset: a .pt is as often data as a model
        "train.bin",
        "labels.csv",
    ],
)
def test_near_miss_a_data_file_that_is_not_there(fixtures, tmp_path, missing):
    run = _trial_error_replaced(
        fixtures,
        tmp_path,
        f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'\n",
    )
    _, report = inspect_json(str(run))
    assert not findings_of(report, "checkpoint-missing")
    assert findings_of(report, "trial-error")


@pytest.mark.parametrize(
    "line",
    [
        # fvcore / detectron2 Checkpointer
        "AssertionError: Checkpoint checkpoints/model_reset_combine.pth not found!",
        # mmcv load_checkpoint: raised only when the path is no file
        "OSError: ../checkpoints/SOLO_R50_3x.pth is not a checkpoint file",
    ],
)
def test_checkpoint_loaders_saying_the_file_is_not_there(line):
    _, report = inspect_json("-", stdin=f"Traceback (most recent call last):\n{line}\n")
    (finding,) = findings_of(report, "checkpoint-missing")
    assert line.split(": ", 1)[1] in finding["message"]


def test_near_miss_a_file_that_is_not_a_full_checkpoint():
    # ComfyUI's warning for a file it cannot place: the file is there.
    text = "Warning, This is not a checkpoint file, trying to load it as a diffusion model only.\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "checkpoint-missing")


def test_tunes_searcher_state_missing_on_resume_is_read_from_its_log_line():
    # Tune logs the searcher's error on a line of its own before the traceback it raises
    # (ray #14667); the traceback's message was cut off.
    text = (
        "2021-03-13 22:04:29,208 ERROR trial_runner.py:279 -- Searcher unable to find "
        "checkpoint in /home/user/ray_results/bohb_test\n"
        "2021-03-13 22:04:35,390 ERROR trial_runner.py:280 -- Runner restore failed.\n"
        "Traceback (most recent call last):\n"
        '  File "/site-packages/ray/tune/suggest/suggestion.py", line 297, in restore_from_dir\n'
        "    raise RuntimeError(\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "checkpoint-missing")
    assert "Searcher unable to find checkpoint" in finding["message"]


def test_near_miss_a_snapshot_of_another_ray_version():
    # Ray 2.60 raises the same class when the snapshot was saved by another Ray version
    # (ray/train/v2/_internal/execution/checkpoint/checkpoint_manager.py).
    text = (
        "ray.train.v2._internal.exceptions.CheckpointManagerInitializationError: You are loading "
        "a checkpoint manager snapshot saved with Ray version 2.50.1 but you are running Ray "
        "version 2.60.0. Please use the same Ray version the checkpoint manager snapshot was "
        "saved with.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "checkpoint-missing")
    assert findings_of(report, "trial-error"), "reported as it stands, with its text"


def test_a_loader_that_says_the_path_does_not_exist():
    """super-gradients' checkpoint loader raises this when `os.path.exists` says no
    (super-gradients #1604, as posted: the trainer had written into a timestamped sub-dir)."""
    text = (
        "FileNotFoundError: Incorrect Checkpoint path:  "
        "/kaggle/working/checkpoints/xxxxx/average_model.pth\n"
        "(This should be an absolute path)\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-missing")
    assert "average_model.pth" in finding["message"]


@pytest.mark.parametrize(
    "text",
    [
        # accelerate's load_state given a LoRA file, not a saved-state dir (lora-scripts #389)
        "ValueError: Tried to find G:/Soft/lora-scripts/output/ag-000001.safetensors but folder "
        "does not exist\n",
        # ChatGLM-Efficient-Tuning's LoRA loader on a wrong --checkpoint_dir (its #264)
        "AssertionError: Provided path (docsetp) does not contain a LoRA weight.\n",
    ],
    ids=["accelerate-load-state", "lora-loader"],
)
def test_loaders_that_name_the_dir_they_were_given(text):
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert findings_of(report, "checkpoint-missing")


def test_near_miss_tunes_own_sync_walk_racing_a_deleted_checkpoint():
    """ray #27168: Tune's sync listed a trial dir, the trial then deleted its temporary
    checkpoint, and the sync's os.lstat raised. Nothing tried to load a checkpoint."""
    text = (
        "ray.exceptions.RayTaskError: ray::_get_recursive_files_and_stats() (pid=1909, "
        "ip=172.31.82.95)\n"
        '  File "/home/ray/anaconda3/lib/python3.7/site-packages/ray/tune/utils/file_transfer.py",'
        " line 218, in _get_recursive_files_and_stats\n"
        "    stat = os.lstat(os.path.join(path, key))\n"
        "FileNotFoundError: [Errno 2] No such file or directory: '/home/ray/ray_results/exp/"
        "HorovodTrainer_00dc0_00002_2_lr=0.3000_2022-07-28_02-17-00/checkpoint_-00001/"
        ".tune_metadata'\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "checkpoint-missing")
    # The same error from code that loads the checkpoint is still a missing checkpoint.
    loading = text.replace("ray/tune/utils/file_transfer.py", "my_project/train.py").replace(
        "_get_recursive_files_and_stats", "load_model"
    )
    _, report = inspect_json("-", stdin=loading)
    assert findings_of(report, "checkpoint-missing")


def test_tensorflows_saver_finding_no_checkpoint_under_its_prefix():
    """CLUENER2020 #2: the run never reached its first save; the restore found nothing."""
    text = "ValueError: The passed  save_path is not a valid checkpoint: ../ner_bert_base/\n"
    _, report = inspect_json("-", stdin=text)
    assert report["findings"][0]["rule"] == "checkpoint-missing"
