"""Smoke's own failure modes: no GPU, no cluster, a bound on time, Ctrl-C; and its report."""

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import validate
from smoke_runs import (
    SMOKE_TIMEOUT_S,
    assert_nothing_left,
    processes_naming,
    run_smoke,
    smoke_env,
)


@pytest.mark.ray_compat
def test_gpus_on_a_machine_without_gpus_fails_fast(smoke_no_gpu):
    assert smoke_no_gpu.returncode == 1
    (finding,) = smoke_no_gpu.findings("resources-insufficient")
    assert "1 GPU" in finding["message"] and "the cluster has 0 GPUs" in finding["message"]
    assert "nvidia-smi" in finding["fix"]
    later = [s["status"] for s in smoke_no_gpu.report["stages"][1:]]
    assert later and set(later) == {"skip"}, "nothing waits on a request that cannot fit"
    assert_nothing_left(smoke_no_gpu)


@pytest.mark.ray_compat
def test_an_unreachable_address_could_not_start(smoke_unreachable):
    assert smoke_unreachable.returncode == 2
    (finding,) = smoke_unreachable.findings("cluster-unreachable")
    assert "Connection refused" in finding["message"]
    assert smoke_unreachable.report["errors"], "exit 2 says why in errors[]"
    assert smoke_unreachable.report["target"]["path"].startswith("127.0.0.1:")


def test_timeout_ends_everything_and_reports_what_finished(tmp_path):
    # A full CPU smoke needs Tune and Train after Ray starts: 14 s is never enough, however
    # fast or slow the machine. How far it got depends on the machine's load, so the test
    # asserts the shape of a cut-off run, not which stage the cut fell in.
    run = run_smoke(tmp_path, "--timeout", "14")
    assert run.returncode == 2
    assert any("--timeout 14" in e["reason"] for e in run.report["errors"])
    statuses = [s["status"] for s in run.report["stages"]]
    assert "error" in statuses, "the stage running when time ran out is an error"
    cut = statuses.index("error")
    assert set(statuses[:cut]) <= {"pass", "warn", "fail"}, statuses  # what finished, as it was
    assert set(statuses[cut:]) <= {"error", "skip"}, statuses  # the rest: cut off or not started
    assert statuses[-1] in ("error", "skip"), "the full smoke cannot finish in 14 s"
    assert_nothing_left(run)


def _events(tmp_path: Path) -> list[dict]:
    """The smoke child's progress lines so far (its events file in the run's work dir)."""
    found = []
    for path in tmp_path.glob("ray-doctor-smoke-*/events.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
    return found


# Each moment is a predicate on the progress lines: the signal goes as soon as it holds.
CTRL_C_MOMENTS = {
    "ray-start": lambda events: any(e.get("stage") == "cluster" for e in events),
    "stage": lambda events: any(
        e["type"] == "start" and e.get("stage") == "device" for e in events
    ),
    "clean-up": lambda events: any(e["type"] == "done" for e in events),
}
# Clean-up comes after the last stage, whichever it is: the quickest one gets there (a full
# smoke took 50 s of the suite to reach the same moment).
CTRL_C_STAGES = {"clean-up": ["--stage", "environment"]}


@pytest.mark.parametrize("moment", list(CTRL_C_MOMENTS))
def test_ctrl_c_stops_ray_and_leaves_the_partial_report(tmp_path, moment):
    stages = CTRL_C_STAGES.get(moment, [])
    child = subprocess.Popen(
        [sys.executable, "-m", "ray_doctor", "smoke", "--format", "json", *stages],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=smoke_env(tmp_path),
        cwd=tmp_path,
    )
    reached = CTRL_C_MOMENTS[moment]
    while child.poll() is None and not reached(_events(tmp_path)):
        time.sleep(0.05)
    assert child.poll() is None, f"smoke ended before the {moment} moment"
    (work_dir,) = tmp_path.glob("ray-doctor-smoke-*")
    ray_temp_dir = json.loads((work_dir / "options.json").read_text())["ray_temp_dir"]
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=SMOKE_TIMEOUT_S)
    assert child.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    report = validate(json.loads(out))
    assert any(e["reason"] == "the run was interrupted" for e in report["errors"])
    if moment != "clean-up":  # after the last stage, every stage has its own result
        assert any(s["status"] in ("error", "skip") for s in report["stages"])
    for leftover in (ray_temp_dir, work_dir):
        assert not processes_naming(str(leftover)), f"a process of the run outlived it ({moment})"
        assert not Path(leftover).exists()
