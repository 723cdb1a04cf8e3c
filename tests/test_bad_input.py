"""Damaged, odd and hostile inputs: errors[] entries or findings, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import PEAK_RSS, experiment_dir, inspect_json, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unprivileged import as_unprivileged_user

from ray_doctor.report import JsonFormatter, build_inspect_report
from ray_doctor.rules import run_rules
from ray_doctor.scan import scan


def copy_experiment(fixtures: Path, scenario: str, dest: Path) -> Path:
    target = dest / scenario
    shutil.copytree(experiment_dir(fixtures, scenario), target)
    return target


def errored_trial_dir(exp: Path) -> Path:
    return next(p for p in sorted(exp.iterdir()) if (p / "error.txt").exists())


def reasons(report: dict) -> str:
    return "\n".join(f"{e['path']}: {e['reason']}" for e in report["errors"])


def test_truncated_last_result_row(fixtures, tmp_path):
    exp = copy_experiment(fixtures, "tune_trial_error", tmp_path)
    result = errored_trial_dir(exp) / "result.json"
    data = result.read_bytes()
    result.write_bytes(data[: len(data) - 40])  # cut inside the last row
    code, report = inspect_json(str(exp))
    assert code == 1
    assert "cut off mid-write" in reasons(report)
    trial = next(t for t in report["trials"] if t["status"] == "ERROR")
    assert trial["rows"] == 1, "the complete rows are still read"


def test_garbage_lines_in_result_json(fixtures, tmp_path):
    exp = copy_experiment(fixtures, "tune_healthy", tmp_path)
    result = next(exp.glob("*/result.json"))
    lines = result.read_bytes().splitlines(keepends=True)
    lines.insert(2, b"\x00\x01garbage that is not json\n")
    result.write_bytes(b"".join(lines))
    code, report = inspect_json(str(exp))
    assert code == 0
    assert "not JSON rows: 3" in reasons(report)


def test_newest_state_not_json_falls_back_to_older_one(fixtures, tmp_path):
    exp = copy_experiment(fixtures, "tune_trial_error", tmp_path)
    state = next(exp.glob("experiment_state-*.json"))
    older = state.with_name("experiment_state-2000-01-01_00-00-00.json")
    shutil.copy(state, older)
    state.write_text('{"trial_data": [["{\\"trial_id\\": ')  # cut off mid-write
    code, report = inspect_json(str(exp))
    assert code == 1
    assert state.name in reasons(report)
    assert report["experiments"][0]["state_file"] == older.name
    assert report["summary"]["trials"] == 3


def test_only_state_file_is_garbage_trials_come_from_dirs(fixtures, tmp_path):
    exp = copy_experiment(fixtures, "tune_trial_error", tmp_path)
    state = next(exp.glob("experiment_state-*.json"))
    state.write_bytes(os.urandom(4096))
    code, report = inspect_json(str(exp))
    assert "not valid JSON" in reasons(report)
    assert report["summary"]["trials"] == 3
    assert code == 1, "the errored trial is still found from its error.txt"


def test_json_nested_deeper_than_the_stack(fixtures, tmp_path):
    """A hostile or damaged file of 200,000 nested brackets: Python's JSON decoder gives up
    with RecursionError, which was an internal error; it is unreadable JSON like any other."""
    exp = copy_experiment(fixtures, "tune_trial_error", tmp_path)
    deep = "[" * 200_000 + "]" * 200_000
    next(exp.glob("experiment_state-*.json")).write_text(deep)
    (errored_trial_dir(exp) / "params.json").write_text(deep)
    code, report = inspect_json(str(exp))
    assert code == 1, "the errored trial is still found from its error.txt"
    assert reasons(report).count("not valid JSON") == 2
    assert report["summary"]["trials"] == 3


@pytest.mark.parametrize("name", ["result.json", "error.txt", "params.json"])
def test_empty_trial_files(fixtures, tmp_path, name):
    exp = copy_experiment(fixtures, "tune_trial_error", tmp_path)
    (errored_trial_dir(exp) / name).write_bytes(b"")
    code, report = inspect_json(str(exp))
    assert code == 1
    assert report["summary"]["trials"] == 3


@pytest.mark.parametrize("name", ["result.json", "error.txt", "params.json", "progress.csv"])
def test_binary_junk_in_trial_files(fixtures, tmp_path, name):
    exp = copy_experiment(fixtures, "tune_trial_error", tmp_path)
    (errored_trial_dir(exp) / name).write_bytes(os.urandom(20_000))
    code, report = inspect_json(str(exp))
    assert code == 1
    assert report["summary"]["trials_by_status"]["ERROR"] == 1


def test_empty_and_junk_state_snapshot_of_train_v2(fixtures, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(experiment_dir(fixtures, "train_v2_rank_failure"), run)
    (run / "checkpoint_manager_snapshot.json").write_bytes(os.urandom(300))
    code, report = inspect_json(str(run))
    assert code in (0, 1)
    assert report["target"]["layout"] == "train-v2"
    assert "checkpoint_manager_snapshot.json" in reasons(report)


def test_non_utf8_names(fixtures, tmp_path):
    exp = copy_experiment(fixtures, "tune_healthy", tmp_path)
    odd = os.fsencode(str(exp)) + b"/train_\xff\xfe_odd"
    os.mkdir(odd)
    with open(odd + b"/result.json", "wb") as f:
        f.write(b'{"training_iteration": 1, "loss": 1.0, "timestamp": 1}\n')
    proc = run_cli("inspect", str(exp), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert any("\\xff" in t["name"] for t in report["trials"])


def test_permission_denied_file_is_an_error_entry(fixtures):
    # Root reads everything, so the check runs as an unprivileged user where needed.
    base = Path(tempfile.mkdtemp(prefix="rd-perm-"))
    try:
        os.chmod(base, 0o755)
        exp = copy_experiment(fixtures, "tune_trial_error", base)
        for path in [exp, *exp.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        error_txt = errored_trial_dir(exp) / "error.txt"
        os.chmod(error_txt, 0o000)
        with as_unprivileged_user() as (python, env):
            command = [*python, "-m", "ray_doctor", "inspect", str(exp), "-f", "json"]
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=120, cwd="/", env=env
            )
        assert "Traceback" not in proc.stderr, proc.stderr
        report = json.loads(proc.stdout)
        assert any(
            e["path"].endswith("error.txt") and e["reason"] == "permission denied"
            for e in report["errors"]
        )
        # The trial is still reported as failed; only its error text is missing, and the
        # finding says the file is there but unreadable, not that Ray never wrote one.
        assert report["summary"]["trials_by_status"]["ERROR"] == 1
        (finding,) = [f for f in report["findings"] if f["rule"] == "trial-error"]
        assert "its error file could not be read" in finding["message"]
        assert "no error.txt on storage" not in finding["message"]
        assert proc.returncode == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_one_gigabyte_result_json_streams_in_bounded_memory(fixtures, tmp_path):
    exp = copy_experiment(fixtures, "tune_healthy", tmp_path)
    result = next(exp.glob("*/result.json"))
    rows = result.read_bytes()
    with open(result, "wb") as f:
        for _ in range(20_000):  # ~15 MB of real rows, then a sparse gigabyte of NUL bytes
            f.write(rows)
        f.truncate(1 << 30)
    code = (
        "import json, resource, sys\n"
        "from ray_doctor.scan import scan\n"
        "result = scan(sys.argv[1])\n"
        "trial = next(t for t in result.experiments[0].trials if t.history.bad_lines)\n"
        "rss_mb = PEAK()\n"
        "print(json.dumps({'rows': trial.history.rows, 'rss_mb': rss_mb,"
        " 'errors': [e.reason for e in result.all_errors]}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_RSS + code, str(exp)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rows"] >= 100_000
    assert out["rss_mb"] < 150, out
    assert out["errors"], "the NUL-filled tail is reported"


MUTABLE = (
    "experiment_state-*.json",
    "*/result.json",
    "*/error.txt",
    "*/params.json",
    "*/progress.csv",
)


@settings(
    max_examples=int(os.environ.get("RAY_DOCTOR_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    pattern=st.sampled_from(MUTABLE),
    scenario=st.sampled_from(["tune_trial_error", "tune_recovered", "tune_retries_exhausted"]),
    action=st.sampled_from(["truncate", "overwrite", "insert", "delete", "empty"]),
    position=st.floats(min_value=0, max_value=1),
    junk=st.binary(min_size=1, max_size=64),
)
def test_mutated_real_fixtures_never_crash(
    fixtures, tmp_path_factory, pattern, scenario, action, position, junk
):
    exp = copy_experiment(fixtures, scenario, tmp_path_factory.mktemp("mutant"))
    victim = sorted(exp.glob(pattern))[0]
    data = victim.read_bytes()
    at = int(position * len(data))
    if action == "truncate":
        victim.write_bytes(data[:at])
    elif action == "overwrite":
        victim.write_bytes(data[:at] + junk + data[at + len(junk) :])
    elif action == "insert":
        victim.write_bytes(data[:at] + junk + data[at:])
    elif action == "delete":
        victim.unlink()
    else:
        victim.write_bytes(b"")
    result = scan(str(exp))
    report = build_inspect_report(result, run_rules(result))
    rendered = json.loads(JsonFormatter().render(report))
    from conftest import validate

    validate(rendered)
    assert rendered["summary"]["experiments"] == 1


def test_gs_uri_without_credentials_is_one_line_not_a_hang(tmp_path):
    """Off GCE with no credentials, Google Cloud Storage retries for up to 15 minutes by
    default: the wait is bounded by the same timeout as S3's, then one line that says what to
    set. The metadata server is a closed local port, so nothing depends on this machine's DNS."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    env = {
        "RAY_DOCTOR_S3_TIMEOUT_S": "1",
        "GCE_METADATA_ROOT": f"127.0.0.1:{closed}",
        "GOOGLE_APPLICATION_CREDENTIALS": "",
        "HOME": str(tmp_path),
        "CLOUDSDK_CONFIG": str(tmp_path),
    }
    for command in ("inspect", "verify-checkpoint"):
        proc = run_cli(command, "--format", "json", "gs://bucket/sweep", env=env)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "ray-doctor: cannot read gs://bucket/sweep: no Google Cloud credentials: set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run where the GCE "
            "metadata server answers"
        ]
        assert json.loads(proc.stdout)["summary"]["exit_code"] == 2
