"""verify-checkpoint as users and CI meet it: URIs, the terminal view, exit codes, schema."""

from __future__ import annotations

import os
import subprocess
import sys

from ckpt_helpers import verify_json


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
