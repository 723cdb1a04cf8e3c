"""The command line as CI and users meet it: exit codes, formats, streams, no tracebacks."""

from __future__ import annotations

import json
import sys

from conftest import REPO, experiment_dir, findings_of, inspect_json, run_cli, validate


def test_help_lists_the_commands():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for command in ("inspect", "schema", "rules", "explain"):
        assert command in proc.stdout


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("ray-doctor ")


def test_help_and_inspect_do_not_import_ray_or_torch(fixtures):
    target = experiment_dir(fixtures, "tune_trial_error")
    code = (
        "import sys\n"
        "from ray_doctor._cli import app\n"
        "for argv in (['--help'], ['inspect', sys.argv[1], '-q', '-f', 'json']):\n"
        "    sys.argv = ['ray-doctor', *argv]\n"
        "    try:\n"
        "        app()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch'))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=60
    )
    assert "HEAVY []" in proc.stderr, proc.stderr


def test_healthy_experiment_exits_0(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_healthy")))
    assert code == 0
    assert report["summary"]["exit_code"] == 0
    assert report["summary"]["trials_by_status"]["TERMINATED"] == 3
    assert not [f for f in report["findings"] if f["severity"] == "error"]


def test_failed_trial_exits_1_and_names_the_error(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_trial_error")))
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert finding["severity"] == "error"
    assert "ValueError: lr=0.1 is too large: loss diverged" in finding["message"]
    assert finding["trial_id"] and finding["fix"] and finding["docs"].endswith("trial-error.md")
    paths = [e["path"] for e in finding["evidence"]]
    assert any(p.endswith("error.txt") for p in paths)
    assert all(e["line"] for e in finding["evidence"])


def test_fail_on_moves_the_threshold(fixtures):
    target = str(experiment_dir(fixtures, "tune_recovered"))
    assert run_cli("inspect", target).returncode == 0  # only an info finding
    assert run_cli("inspect", target, "--fail-on", "info").returncode == 1
    failing = str(experiment_dir(fixtures, "tune_trial_error"))
    assert run_cli("inspect", failing, "--fail-on", "never").returncode == 0


def test_missing_path_exits_2_with_one_line(tmp_path):
    proc = run_cli("inspect", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "no such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_path_still_emits_a_json_report(tmp_path):
    proc = run_cli("inspect", str(tmp_path / "nope"), "--format", "json")
    assert proc.returncode == 2
    report = validate(json.loads(proc.stdout))
    assert report["summary"]["exit_code"] == 2
    assert report["errors"][0]["reason"]


def test_bad_arguments_exit_2():
    proc = run_cli("inspect", ".", "--fail-on", "sometimes")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_no_experiment_data_exits_3(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.md").write_text("nothing to see\n")
    proc = run_cli("inspect", str(tmp_path))
    assert proc.returncode == 3
    assert "No Ray experiment data" in proc.stdout
    code, report = inspect_json(str(tmp_path))
    assert code == 3 and report["target"]["layout"] is None


def test_output_file_gets_the_report_and_stdout_stays_empty(fixtures, tmp_path):
    out = tmp_path / "report.json"
    proc = run_cli(
        "inspect", str(experiment_dir(fixtures, "tune_trial_error")), "-f", "json", "-o", str(out)
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    report = validate(json.loads(out.read_text()))
    assert findings_of(report, "trial-error")


def test_terminal_report_shows_table_findings_and_summary(fixtures):
    proc = run_cli("inspect", str(experiment_dir(fixtures, "tune_trial_error")))
    out = proc.stdout
    assert "3 trials: 1 ERROR, 2 TERMINATED" in out
    assert "trial-error" in out and "ValueError: lr=0.1 is too large" in out
    assert "fix:" in out and "evidence:" in out
    assert "1 error" in out and "exit 1" in out
    assert "\x1b[" not in out, "no colour codes when NO_COLOR is set / not a TTY"


def test_a_train_v2_run_read_without_its_logs_says_where_its_outcome_is(fixtures):
    # Train V2 storage looks the same after a crash and after a clean finish: "exit 0" alone
    # would read as "it worked".
    failed = fixtures / "train_v2_rank_failure"
    run_dir = str(experiment_dir(fixtures, "train_v2_rank_failure"))
    note = "Train V2 keeps no run status or error in storage_path"
    wide = {"COLUMNS": "300"}
    for output_format in ("terminal", "markdown"):
        alone = run_cli("inspect", run_dir, "--format", output_format, env=wide)
        assert alone.returncode == 0 and note in alone.stdout
        with_logs = run_cli(
            "inspect", run_dir, "--logs", str(failed / "driver.log"), "-f", output_format, env=wide
        )
        assert with_logs.returncode == 1 and note not in with_logs.stdout
    tune_trial = next(experiment_dir(fixtures, "tune_trial_error").glob("*/params.json")).parent
    tune = run_cli("inspect", str(tune_trial), env=wide)
    assert "UNKNOWN" in tune.stdout and note not in tune.stdout


def test_stdin_error_text(fixtures):
    exp = experiment_dir(fixtures, "tune_trial_error")
    error_txt = next(exp.glob("*/error.txt")).read_text()
    code, report = inspect_json("-", stdin=error_txt)
    assert code == 1
    assert report["target"]["layout"] == "log"
    (finding,) = findings_of(report, "trial-error")
    assert finding["trial_id"] is None
    assert "ValueError: lr=0.1 is too large" in finding["message"]
    assert finding["evidence"][0]["path"] == "<stdin>"


def test_plain_driver_log_file(fixtures):
    log = fixtures / "train_v2_rank_failure" / "driver.log"
    code, report = inspect_json(str(log))
    assert code == 1
    (finding,) = findings_of(report, "trial-error")
    assert "ValueError: Found NaN in input batch on rank 1" in finding["message"]
    # The benign background-thread traceback in the same log is not reported as the cause.
    assert "multiple active Ray instances" not in json.dumps(report["findings"])


def test_file_uri_goes_through_pyarrow(fixtures):
    target = experiment_dir(fixtures, "tune_trial_error")
    code, report = inspect_json(target.as_uri())
    assert code == 1
    assert report["target"]["path"].startswith("file://")
    assert report["summary"]["trials"] == 3
    (finding,) = findings_of(report, "trial-error")
    assert finding["evidence"][0]["path"].startswith("file://")


def test_unreachable_uri_exits_2():
    proc = run_cli("inspect", "nosuchscheme://bucket/path")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_schema_command_prints_the_published_schema():
    proc = run_cli("schema")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == json.loads((REPO / "docs" / "report.schema.json").read_text())


def test_rules_and_explain():
    listed = run_cli("rules")
    for rule in ("trial-error", "trial-incomplete", "retries-exhausted", "recovered-after-failure"):
        assert rule in listed.stdout
    explained = run_cli("explain", "retries-exhausted")
    assert explained.returncode == 0
    for section in ("## Symptom", "## Likely cause", "## Evidence it uses", "## Fix"):
        assert section in explained.stdout
    unknown = run_cli("explain", "no-such-rule")
    assert unknown.returncode == 2 and "known rules" in unknown.stderr


def test_rules_list_reads_at_80_columns():
    from ray_doctor.rules import RULES

    listed = run_cli("rules", env={"COLUMNS": "80"})
    lines = listed.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    # One line per rule (a long title may fold once), never a word per line.
    assert len(lines) <= 2 * (len(RULES) + 8)
    for rule in RULES:
        assert any(line.startswith(rule.id + " ") for line in lines), rule.id


def test_python_dash_m_works():
    proc = run_cli("--version")
    assert proc.returncode == 0


def test_reading_logs_reports_progress_and_is_silent_off_a_terminal(fixtures):
    from ray_doctor.scan import scan

    target = fixtures / "tune_oom_memory_monitor"
    logs = target / "session_logs"
    heard: list[tuple[str, int, int]] = []
    scan(str(target), [str(logs)], progress=lambda *call: heard.append(call))
    files = len(list(logs.iterdir()))
    log_calls = [call for call in heard if call[0] == "logs session_logs"]
    assert log_calls[-1] == ("logs session_logs", files, files)
    assert [done for _, done, _ in log_calls] == list(range(1, files + 1))
    # Off a terminal (stderr is a pipe here) nothing but the report comes out.
    proc = run_cli("inspect", str(target), "--logs", str(logs), "--format", "json")
    assert proc.returncode == 1
    assert proc.stderr == ""
