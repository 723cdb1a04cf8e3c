"""ray-doctor's callbacks inside real Ray runs (tests/integrations/callback_runs.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURES, inspect_json, validate
from smoke_runs import processes_naming

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DRIVER = Path(__file__).with_name("callback_runs.py")


@dataclass
class Section:
    output: str  # everything the driver printed in the section (callbacks' lines included)
    result: dict  # what the run itself returned

    @property
    def doctor_lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if "ray-doctor: " in line]


def _strict_memory_monitor() -> dict[str, str]:
    sys.path.insert(0, str(FIXTURES))
    try:
        from generate import oom_env
    finally:
        sys.path.remove(str(FIXTURES))
    # 6 GB, not the fixtures' 3: `make test` runs other tests beside this one (on the other
    # xdist worker), and their memory counts against the same node-wide threshold; with 3 GB
    # the monitor killed the trial that was to raise before it could.
    env = oom_env(headroom_gb=6.0)
    env["RDTEST_OOM_CAP_MB"] = env.pop("RDFIX_OOM_CAP_MB")
    return env


@pytest.fixture(scope="session")
def callback_runs(tmp_path_factory) -> tuple[dict[str, Section], Path]:
    out = tmp_path_factory.mktemp("callback_runs")
    # Ray's socket paths must stay under 108 bytes: a short private temp dir.
    ray_temp = Path(tempfile.mkdtemp(prefix="rdcb-", dir="/tmp"))
    env = {**os.environ, **_strict_memory_monitor(), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(out), str(ray_temp)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=out,
    )
    (out / "driver.out").write_text(proc.stdout)
    (out / "driver.err").write_text(proc.stderr)
    assert proc.returncode == 0, f"see {out}/driver.err: {proc.stderr[-2000:]}"
    sections: dict[str, Section] = {}
    name = None
    lines: list[str] = []
    for line in proc.stdout.splitlines():
        if line.startswith("=== "):
            name, lines = line[4:], []
        elif line.startswith("RESULT ") and name:
            sections[name] = Section("\n".join(lines), json.loads(line[7:]))
        elif name:
            lines.append(line)
    assert not processes_naming(str(ray_temp)), "Ray processes of the run are still alive"
    shutil.rmtree(ray_temp, ignore_errors=True)
    return sections, out


def test_failing_sweep_prints_the_cause_trials_fix_and_report(callback_runs):
    sections, out = callback_runs
    failing = sections["failing"]
    text = "\n".join(failing.doctor_lines)
    assert "trial-error" in text and "ValueError: lr=0.1 is too large: loss diverged" in text
    assert "oom-ray-memory-monitor" in text
    assert "fix: " in text
    assert f"full report: {out / 'failing-report.json'}" in text
    # The sweep ended as it does without the callback: the memory monitor's kill of a trial
    # actor fails Ray 2.60's driver (fixtures/tune_oom_memory_monitor/driver.log).
    trials = failing.result["trials"]
    assert failing.result["raised"] == "RuntimeError"
    assert trials["ok"] == {"error": None, "loss": pytest.approx(1 / 3), "step": 3}
    assert trials["raise"]["error"]


def test_failing_sweep_report_is_the_inspect_contract(callback_runs):
    _, out = callback_runs
    report = validate(json.loads((out / "failing-report.json").read_text()))
    rules = {f["rule"] for f in report["findings"]}
    assert {"trial-error", "oom-ray-memory-monitor"} <= rules
    # The storage alone cannot say why the driver stopped; the callback saw the exception
    # that stopped it.
    _, offline = inspect_json(str(out / "failing"))
    offline_rules = {f["rule"] for f in offline["findings"]}
    assert "trial-error" in offline_rules and "oom-ray-memory-monitor" not in offline_rules


def test_healthy_sweep_prints_nothing(callback_runs):
    sections, _ = callback_runs
    healthy = sections["healthy"]
    assert healthy.doctor_lines == []
    assert healthy.result["raised"] is None
    assert healthy.result["errors"] == 0 and healthy.result["terminated"] == 2


def test_callback_that_breaks_never_reaches_the_run(callback_runs):
    """The callback's scan raises: one line says so, and the sweep ends as without it."""
    sections, _ = callback_runs
    broken, failing = sections["broken"], sections["failing"]
    skipped = [line for line in broken.doctor_lines if "skipped" in line]
    assert skipped and all("scan exploded (test)" in line for line in skipped)
    assert broken.result["raised"] is None
    assert broken.result["errors"] == 1 and broken.result["terminated"] == 1
    assert broken.result["trials"]["ok"] == failing.result["trials"]["ok"]
    assert broken.result["trials"]["raise"] == failing.result["trials"]["raise"]


def test_train_v2_callback_keeps_rank_1s_exception(callback_runs):
    sections, out = callback_runs
    train = sections["train"]
    assert train.result["raised"]  # the run failed as it would have without the callback
    assert any("rank 1" in line and "ValueError" in line for line in train.doctor_lines)
    records = [
        json.loads(line)
        for line in (out / "train" / "ray-doctor-errors.jsonl").read_text().splitlines()
    ]
    (record,) = records
    assert record["rank"] == 1 and record["attempt"] == 1
    assert record["type"] == "ValueError"
    assert record["message"] == "Found NaN in input batch on rank 1 (epoch 2, step 0)"
    assert 'raise ValueError("Found NaN' in record["traceback"]
    assert record["time"].endswith("+00:00")


def test_offline_inspect_of_the_train_v2_run_dir_alone_names_rank_1(callback_runs):
    _, out = callback_runs
    code, report = inspect_json(str(out / "train"))
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["rule"] == "trial-error"]
    assert "rank 1" in finding["message"]
    assert "ValueError: Found NaN in input batch on rank 1" in finding["message"]
    assert any(e["path"].endswith("ray-doctor-errors.jsonl") for e in finding["evidence"])
    assert report["trials"][0]["status"] == "ERROR"
