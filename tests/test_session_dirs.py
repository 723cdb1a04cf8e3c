"""Ray's logs are in /tmp/ray/session_latest/logs; people point ray-doctor at /tmp/ray or at
the session dir as often as at its logs/. Each must read the same logs, and a dir with no logs
must say so instead of reading nothing in silence."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import experiment_dir, inspect_json, run_cli

OOM_SESSION = "tune_oom_memory_monitor"


def _ray_temp_dir(fixtures: Path, tmp_path: Path) -> Path:
    """/tmp/ray as Ray leaves it: an older session, the latest one, `session_latest` to it."""
    ray = tmp_path / "ray"
    older = ray / "session_2026-11-21_10-00-00_000001_11" / "logs"
    older.mkdir(parents=True)
    (older / "raylet.out").write_text("[2026-11-21 10:00:00,000 I 1 1] (raylet) main.cc:1: ok\n")
    (older / "python-core-worker-ab_1.log").write_text("")
    latest = ray / "session_2026-11-22_06-30-38_473699_12"
    shutil.copytree(fixtures / OOM_SESSION / "session_logs", latest / "logs")
    (ray / "session_latest").symlink_to(latest.name)
    return ray


def _rules(report: dict) -> list[str]:
    return sorted(f["rule"] for f in report["findings"])


def test_ray_temp_dir_and_session_dir_read_the_latest_session_logs(fixtures, tmp_path):
    ray = _ray_temp_dir(fixtures, tmp_path)
    logs = ray / "session_latest" / "logs"
    code, direct = inspect_json(str(logs))
    assert code == 1 and "oom-ray-memory-monitor" in _rules(direct)
    for target in (ray, ray / "session_latest"):
        code, report = inspect_json(str(target))
        assert code == 1, target
        assert _rules(report) == _rules(direct)
        # The report says which logs it read.
        assert report["experiments"][0]["path"].endswith("session_latest/logs")


def test_logs_option_takes_a_session_dir_or_the_ray_temp_dir(fixtures, tmp_path):
    ray = _ray_temp_dir(fixtures, tmp_path)
    experiment = experiment_dir(fixtures, OOM_SESSION)
    _, direct = inspect_json(str(experiment), "--logs", str(ray / "session_latest" / "logs"))
    for target in (ray, ray / "session_latest"):
        _, report = inspect_json(str(experiment), "--logs", str(target))
        assert _rules(report) == _rules(direct)
        assert not report["errors"]


def test_logs_option_on_a_dir_without_logs_says_so(fixtures, tmp_path):
    empty = tmp_path / "not-logs"
    empty.mkdir()
    (empty / "notes.txt").write_text("nothing from Ray here\n")
    experiment = experiment_dir(fixtures, "tune_trial_error")
    _, report = inspect_json(str(experiment), "--logs", str(empty))
    assert [e["path"] for e in report["errors"]] == [str(empty)]
    assert "no Ray session logs here" in report["errors"][0]["reason"]
    text = run_cli("inspect", str(experiment), "--logs", str(empty)).stdout
    assert "/tmp/ray/session_latest/logs" in text


def test_a_storage_path_with_a_logs_dir_is_still_read_as_experiments(fixtures, tmp_path):
    storage = tmp_path / "ray_results"
    shutil.copytree(experiment_dir(fixtures, "tune_trial_error"), storage / "tune_trial_error")
    shutil.copytree(fixtures / OOM_SESSION / "session_logs", storage / "logs")
    code, report = inspect_json(str(storage))
    assert code == 1
    assert [e["name"] for e in report["experiments"]] == ["tune_trial_error"]
    assert "trial-error" in _rules(report)
