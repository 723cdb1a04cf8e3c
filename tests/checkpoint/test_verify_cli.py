"""verify-checkpoint as users and CI meet it: URIs, the terminal view, exit codes, schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from ckpt_helpers import verify_json
from conftest import experiment_dir


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-m", "ray_doctor", "verify-checkpoint", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_file_uri_goes_through_pyarrow(healthy_pt):
    code, report = verify_json(healthy_pt.parent.as_uri())
    assert code == 0 and report["target"]["path"].startswith("file://")
    assert report["checkpoints"][0]["tensors"] >= 10


def test_file_uri_still_catches_damage(healthy_pt):
    data = healthy_pt.read_bytes()
    healthy_pt.write_bytes(data[:-100])
    code, report = verify_json(healthy_pt.as_uri())
    assert code == 1 and report["findings"][0]["rule"] == "checkpoint-corrupt"


def test_terminal_view(healthy_pt):
    proc = run(str(healthy_pt.parent))
    assert proc.returncode == 0
    assert "1 checkpoint(s)" in proc.stdout and "torch-zip" in proc.stdout
    assert "0 errors" in proc.stdout and "\x1b[" not in proc.stdout


def test_fail_on_warning_makes_a_prefix_warning_fail(tmp_path):
    import torch

    torch.save({"module.w": torch.ones(2)}, tmp_path / "m.pt")
    assert run(str(tmp_path / "m.pt")).returncode == 0
    assert run(str(tmp_path / "m.pt"), "--fail-on", "warning").returncode == 1


def test_nothing_to_verify_and_missing_reference(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    proc = run(str(tmp_path / "notes.txt"))
    assert proc.returncode == 0, "a text file is looked at and found harmless"
    proc = run(str(tmp_path / "notes.txt"), "--against", str(tmp_path / "missing.pt"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_an_experiment_dir_is_verified_checkpoint_by_checkpoint(fixtures):
    # Read as one checkpoint, the experiment's own tuner.pkl and searcher state would be
    # "unsafe pickles": the dir is taken as --all takes it, and stderr says so.
    exp = str(experiment_dir(fixtures, "tune_healthy"))
    proc = run(exp, "--format", "json")
    assert proc.returncode == 0, proc.stdout
    assert "not a checkpoint: verifying each checkpoint in it" in proc.stderr
    _, with_all = verify_json(exp, "--all")
    plain = json.loads(proc.stdout)
    assert plain["target"]["layout"] == "tune"
    assert [c["path"] for c in plain["checkpoints"]] == [c["path"] for c in with_all["checkpoints"]]
    assert len(plain["checkpoints"]) == 6 and not plain["findings"]
    assert "not a checkpoint" not in run(exp, "--quiet").stderr
    # A reference is one checkpoint: a run dir there is a usage error, not a crash.
    checkpoint = next(experiment_dir(fixtures, "tune_healthy").glob("*/checkpoint_000001"))
    proc = run(str(checkpoint), "--against", exp)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "name one checkpoint in it" in proc.stderr and "internal error" not in proc.stderr


def test_a_trial_dir_and_a_storage_path_are_verified_as_runs(fixtures, tmp_path):
    exp = experiment_dir(fixtures, "tune_corrupt_checkpoint")
    trial = next(p for p in sorted(exp.iterdir()) if (p / "params.json").exists())
    storage = tmp_path / "ray_results"
    shutil.copytree(exp, storage / exp.name)
    for target, layout in ((trial, "trial"), (storage, "storage")):
        code, report = verify_json(str(target))
        assert report["target"]["layout"] == layout
        assert all(c["trial_id"] for c in report["checkpoints"])
        # The sweep's one trial: its truncated newest checkpoint, and nothing about Ray's files.
        assert code == 1 and {f["rule"] for f in report["findings"]} == {"checkpoint-corrupt"}
        assert report["latest_restorable"][0]["checkpoint"]


def test_a_model_dir_with_its_own_params_json_is_one_checkpoint(healthy_pt, tmp_path):
    # Llama-style dirs hold weights beside a params.json: no Tune trial dir for all that.
    model = tmp_path / "llama"
    model.mkdir()
    shutil.copy(healthy_pt, model / "consolidated.00.pth")
    (model / "params.json").write_text('{"dim": 8, "n_layers": 2}')
    code, report = verify_json(str(model))
    assert code == 0
    assert report["target"]["layout"] == "checkpoint"
    assert len(report["checkpoints"]) == 1 and report["checkpoints"][0]["tensors"] >= 10
