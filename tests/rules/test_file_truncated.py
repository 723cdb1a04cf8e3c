"""file-truncated: a real Ray 2.60 sweep whose storage (a 320 KB tmpfs) filled up mid-run."""

from __future__ import annotations

import shutil

from conftest import experiment_dir, findings_of, inspect_json


def test_storage_that_filled_up(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_storage_full")))
    assert code == 1
    assert report["findings"][0]["rule"] == "disk-full", "the cause leads"
    (finding,) = findings_of(report, "file-truncated")
    message = finding["message"]
    assert "experiment_state-" in message and "ends at byte" in message
    assert "a multiple of 4,096" in message
    assert "params.json" in message and "is empty" in message
    assert "No space left on device" in message
    assert any(e["path"].endswith(".json") for e in finding["evidence"])


def test_cut_off_files_alone_are_never_a_clean_bill_of_health(fixtures, tmp_path):
    # The same run with its error files gone: nothing says "disk full" any more, but the
    # files that stop mid-write still do not let the run pass.
    copy = tmp_path / "tune_storage_full"
    shutil.copytree(experiment_dir(fixtures, "tune_storage_full"), copy)
    for error_file in copy.rglob("error.txt"):
        error_file.unlink()
    code, report = inspect_json(str(copy))
    assert code == 1
    (finding,) = findings_of(report, "file-truncated")
    assert "nothing here says which" in finding["message"]


def test_near_miss_whole_files_and_files_broken_in_the_middle(fixtures, tmp_path):
    _, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert not findings_of(report, "file-truncated")
    # A state file damaged inside but whole at its end is unreadable, not cut off.
    copy = tmp_path / "tune_healthy"
    shutil.copytree(experiment_dir(fixtures, "tune_healthy"), copy)
    (state,) = copy.glob("experiment_state-*.json")
    data = bytearray(state.read_bytes())
    data[len(data) // 2] = ord("\x01")
    state.write_bytes(bytes(data))
    _, report = inspect_json(str(copy))
    assert not findings_of(report, "file-truncated")
