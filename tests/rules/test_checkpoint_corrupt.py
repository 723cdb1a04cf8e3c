"""checkpoint-corrupt: a restore from a truncated torch checkpoint (real Ray 2.60 run)."""

import pytest
from conftest import experiment_dir, findings_of, inspect_json


def test_fires_on_the_restore_failure_and_leads(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_corrupt_checkpoint")))
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-corrupt")
    assert report["findings"][0]["rule"] == "checkpoint-corrupt"
    assert "failed finding central directory" in finding["message"]
    assert "checkpoint_000002" in finding["message"]
    assert {r["rule"] for r in finding["related"]} == {"retries-exhausted", "trial-error"}
    assert "verify-checkpoint" in finding["fix"]


def test_near_miss_weights_only_refusal_is_not_corruption():
    text = (
        "_pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed the default "
        "value of the `weights_only` argument in `torch.load` from `False` to `True`.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "checkpoint-corrupt")
    assert findings_of(report, "trial-error")


def test_near_miss_first_failure_was_not_a_restore(fixtures):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_retries_exhausted")))
    assert not findings_of(report, "checkpoint-corrupt")


@pytest.mark.parametrize(
    "line",
    [
        "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge",
        "_pickle.UnpicklingError: invalid load key, 'v'.",
        "_pickle.UnpicklingError: invalid load key, '<'.",
    ],
)
def test_first_bytes_of_another_format_say_it_may_be_no_checkpoint_at_all(line):
    # A git-lfs pointer, an HTML page or another file passed as the path read like this.
    _, report = inspect_json("-", stdin=f"Traceback (most recent call last):\n{line}\n")
    (finding,) = findings_of(report, "checkpoint-corrupt")
    assert "git-lfs pointer" in finding["message"]
    assert "head -c" in finding["fix"]


def test_an_old_torch_reading_a_damaged_legacy_file():
    """torch before the zip format read each storage's size from the file and checked it
    (csrc serialization, readFileRaw): a bad download reads as a size of 0 (bts #76, as
    posted, with the space before the colon the paste has)."""
    code, report = inspect_json(
        "-", stdin="RuntimeError : storage has wrong size: expected 0 got 82944\n"
    )
    assert code == 1
    (finding,) = findings_of(report, "checkpoint-corrupt")
    assert "storage has wrong size" in finding["message"]


def test_a_hugging_face_checkpoint_folder_written_in_part():
    """fms-hf-tuning #432: the job stopped while saving checkpoint-25; resuming from the
    newest folder found no trainer_state.json (the Trainer writes it after the weights)."""
    text = (
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'/cos1/output/sg/fine-tuned-tiny-llama-new3/checkpoint-25/trainer_state.json'\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "checkpoint-corrupt")
    assert "checkpoint-25, a checkpoint folder written only in part" in finding["message"]
    assert "Move checkpoint-25 aside" in finding["fix"]
    assert not findings_of(report, "checkpoint-missing")


def test_near_miss_a_trainer_state_outside_a_checkpoint_folder():
    text = "FileNotFoundError: [Errno 2] No such file or directory: '/out/trainer_state.json'\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "checkpoint-corrupt")


def test_a_legacy_torch_file_in_a_markdown_mangled_paste():
    """yolact #235: the poster's markdown glued an underscore to 'got'."""
    text = "_RuntimeError: storage has wrong size: expected 342948543801467925 got_ 1**\n"
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "checkpoint-corrupt")


def test_torch_unexpected_eof_as_a_log_line():
    """torch's reader of a file cut short, pasted indented in a code block after the program
    died (strl #2, as posted): not an exception line, still the cause."""
    text = (
        " RuntimeError: unexpected EOF, expected 9781136 more bytes. The file might be "
        "corrupted.\n"
        "terminate called without an active exception\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    assert report["findings"][0]["rule"] == "checkpoint-corrupt"
