"""Hostile and odd inputs to verify-checkpoint: findings or errors[], never a traceback or hang."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from ckpt_helpers import rules_of, trained_state, verify_json
from conftest import PEAK_RSS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unprivileged import as_unprivileged_user

from ray_doctor.checkpoint import diagnose, verify


def test_missing_path_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ray_doctor", "verify-checkpoint", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_symlink_loop_in_a_checkpoint_dir(healthy_pt):
    (healthy_pt.parent / "loop").symlink_to(healthy_pt.parent / "loop")
    (healthy_pt.parent / "cycle").symlink_to(healthy_pt.parent)
    code, report = verify_json(str(healthy_pt.parent))
    assert code == 0, report["findings"]


def test_thousands_of_files(tmp_path):
    directory = tmp_path / "checkpoint_000000"
    directory.mkdir()
    for index in range(3000):
        (directory / f"shard_{index:05d}.json").write_text("{}")
    torch.save(trained_state()["model"], directory / "model.pt")
    started = time.monotonic()
    code, _report = verify_json(str(directory))
    assert code == 0 and time.monotonic() - started < 60


def test_permission_denied_file(healthy_pt):
    base = Path(tempfile.mkdtemp(prefix="rd-ckpt-perm-"))
    try:
        os.chmod(base, 0o755)
        target = base / "checkpoint_000001"
        shutil.copytree(healthy_pt.parent, target)
        os.chmod(target, 0o755)
        os.chmod(target / "checkpoint.pt", 0o000)
        with as_unprivileged_user() as (python, env):
            command = [*python, "-m", "ray_doctor", "verify-checkpoint", str(target), "-f", "json"]
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=120, cwd="/", env=env
            )
        assert "Traceback" not in proc.stderr, proc.stderr
        report = json.loads(proc.stdout)
        assert "permission denied" in report["findings"][0]["message"]
        assert proc.returncode == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_two_gigabyte_file_of_nothing_is_rejected_quickly_in_bounded_memory(tmp_path):
    path = tmp_path / "model.bin"
    with open(path, "wb") as handle:
        handle.truncate(2 * 1024**3)  # sparse: reads as zeros
    code = (
        "import json, resource, sys, time\n"
        "from ray_doctor.checkpoint import verify, diagnose\n"
        "start = time.monotonic()\n"
        "result = verify(sys.argv[1])\n"
        "rules = [f.rule for f in diagnose(result)]\n"
        "print(json.dumps({'rules': rules, 'seconds': time.monotonic() - start,"
        " 'rss_mb': PEAK()}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_RSS + code, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rules"] == ["checkpoint-corrupt"]
    assert out["rss_mb"] < 200 and out["seconds"] < 30


@settings(
    max_examples=int(os.environ.get("RAY_DOCTOR_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    position=st.floats(min_value=0, max_value=1),
    junk=st.binary(min_size=1, max_size=32),
    action=st.sampled_from(["overwrite", "truncate", "insert"]),
)
def test_mutated_real_checkpoints_never_crash(tmp_path_factory, position, junk, action):
    directory = tmp_path_factory.mktemp("mutant")
    path = directory / "checkpoint.pt"
    torch.save(trained_state(), path)
    data = path.read_bytes()
    at = int(position * len(data))
    if action == "overwrite":
        data = data[:at] + junk + data[at + len(junk) :]
    elif action == "truncate":
        data = data[:at]
    else:
        data = data[:at] + junk + data[at:]
    path.write_bytes(data)
    result = verify(str(path))
    found = diagnose(result)
    assert all(
        f.rule
        in {
            "checkpoint-corrupt",
            "checkpoint-unsafe",
            "checkpoint-nonfinite",
            "state-dict-prefix",
            "optimizer-mismatch",
        }
        for f in found
    )
    assert rules_of  # shared helper module
