"""Inspect is read-only and never unpickles anything it finds."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from conftest import (
    REPO,
    canary_pickle,
    experiment_dir,
    findings_of,
    inspect_json,
    run_cli,
    tree_snapshot,
)

SCENARIOS = [
    "tune_healthy",
    "tune_trial_error",
    "tune_retries_exhausted",
    "tune_recovered",
    "tune_sigkill",
    "tune_corrupt_checkpoint",
    "tune_driver_killed",
    "tune_nan_metrics",
    "train_v2_healthy",
    "train_v2_rank_failure",
]


def test_inspect_leaves_every_fixture_byte_for_byte_unchanged(fixtures):
    before = tree_snapshot(fixtures)
    for scenario in SCENARIOS:
        base = fixtures / scenario
        args = ["inspect", str(base), "--logs", str(base / "driver.log"), "-q"]
        if (base / "session_logs").exists():
            args += ["--logs", str(base / "session_logs")]
        proc = run_cli(*args)
        assert proc.returncode in (0, 1), (scenario, proc.stderr)
        run_cli(*args, "--format", "json")
    assert tree_snapshot(fixtures) == before


def test_no_pickle_found_in_an_experiment_is_ever_loaded(fixtures, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_error"), exp)
    canary = tmp_path / "CANARY"
    payload = canary_pickle(canary)
    # Every pickle Ray leaves behind, including the ones named .json.
    (exp / "tuner.pkl").write_bytes(payload)
    for path in exp.glob("basic-variant-state-*.json"):
        path.write_bytes(payload)
    for trial_dir in (p for p in exp.iterdir() if p.is_dir()):
        (trial_dir / "params.pkl").write_bytes(payload)
        (trial_dir / "error.pkl").write_bytes(payload)
    # A CLOUDPICKLE_FALLBACK blob inside the experiment state, where Ray puts unencodable config.
    state_path = next(exp.glob("experiment_state-*.json"))
    state = json.loads(state_path.read_text())
    trial = json.loads(state["trial_data"][0][0])
    trial["config"]["optimizer"] = {"_type": "CLOUDPICKLE_FALLBACK", "value": payload.hex()}
    state["trial_data"][0][0] = json.dumps(trial)
    state_path.write_text(json.dumps(state))

    code, report = inspect_json(str(exp))
    assert not canary.exists(), "a pickle from the inspected data was executed"
    assert code == 1 and findings_of(report, "trial-error")
    configs = [t["config"] for t in report["trials"] if "optimizer" in t["config"]]
    assert configs and configs[0]["optimizer"] == "<pickled object>"


def test_source_has_no_unpickling_calls():
    pattern = re.compile(r"pickle\.loads?\(|cloudpickle|dill\.load|weights_only\s*=\s*False")
    offenders = []
    for path in (REPO / "ray_doctor").rglob("*.py"):
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            if pattern.search(line) and "# safe:" not in line:
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
            if "torch.load(" in line and "weights_only=True" not in line:
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert not offenders, offenders


def test_no_module_level_ray_or_torch_import_outside_smoke_and_checkpoint():
    pattern = re.compile(r"^(import|from) (ray|torch)\b")
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "ray_doctor").rglob("*.py")
        if not {"smoke", "checkpoint"} & set(path.relative_to(REPO).parts)
        and any(pattern.match(line) for line in path.read_text().splitlines())
    ]
    assert not offenders


def test_fifo_in_an_experiment_does_not_hang(fixtures, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_error"), exp)
    trial_dir = next(p for p in exp.iterdir() if (p / "error.txt").exists())
    (trial_dir / "result.json").unlink()
    os.mkfifo(trial_dir / "result.json")
    (trial_dir / "error.txt").unlink()
    (trial_dir / "error.txt").symlink_to("/dev/zero")  # a file that never ends
    (trial_dir / "progress.csv").unlink()
    (trial_dir / "progress.csv").symlink_to(tmp_path / "gone.csv")
    proc = run_cli("inspect", str(exp), "-f", "json")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = {Path(e["path"]).name: e["reason"] for e in json.loads(proc.stdout)["errors"]}
    assert errors == {
        "result.json": "not a regular file: not read",
        "error.txt": "not a regular file: not read",
        "progress.csv": "a link to nothing: not read",
    }
    (finding,) = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "trial-error"]
    assert "error file could not be read" in finding["message"]


def test_an_experiment_state_that_is_a_fifo_is_named_not_taken_for_missing(fixtures, tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_error"), exp)
    (state,) = exp.glob("experiment_state-*.json")
    state.unlink()
    os.mkfifo(state)
    code, report = inspect_json(str(exp))
    assert code == 1  # the trials are still read from their dirs
    assert report["summary"]["trials_by_status"]["ERROR"] == 1
    errors = {Path(e["path"]).name: e["reason"] for e in report["errors"]}
    assert errors[state.name] == "not a regular file"
    assert "never synced" not in str(report["errors"])


def test_a_fifo_given_as_logs_is_reported_once_and_does_not_hang(fixtures, tmp_path):
    fifo = tmp_path / "driver.log"
    os.mkfifo(fifo)
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")), "--logs", str(fifo))
    assert code == 0
    assert [e["reason"] for e in report["errors"]] == ["not a regular file"]


def test_symlink_loop_is_reported_not_followed_forever(tmp_path, fixtures):
    exp = tmp_path / "exp"
    shutil.copytree(experiment_dir(fixtures, "tune_healthy"), exp)
    (exp / "loop").symlink_to(exp / "loop")
    (exp / "cycle").symlink_to(exp)
    code, report = inspect_json(str(exp))
    assert code == 0
    assert report["summary"]["trials"] == 3
    assert Path(exp / "loop").is_symlink()
