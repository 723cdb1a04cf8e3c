"""Every format comes out of every command, with the exit code the JSON report gives, and a
run that cannot happen still leaves a report in the machine formats."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from conftest import run_cli, validate
from samples import smoke_report

from ray_doctor.report import FORMATS, FormatOptions, make_formatter

COMMANDS = {
    "inspect": ("inspect", "tune_trial_error", "--logs", "tune_trial_error/driver.log"),
    "verify-checkpoint": ("verify-checkpoint", "--all", "tune_corrupt_checkpoint"),
}


def looks_like(output_format: str, text: str, command: str) -> None:
    """Enough of each format to know it is that format, about that command."""
    if output_format == "json":
        assert validate(json.loads(text))["command"] == command
    elif output_format == "sarif":
        log = json.loads(text)
        assert log["version"] == "2.1.0" and log["runs"][0]["properties"]["command"] == command
    elif output_format == "junit":
        assert ET.fromstring(text).get("name") == f"ray-doctor {command}"
    elif output_format == "github":
        assert text.splitlines()[-1].startswith(f"ray-doctor {command}: ")
    elif output_format == "markdown":
        assert text.startswith("### ") and f"ray-doctor {command}" in text.splitlines()[0]
    elif output_format == "html":
        assert text.startswith("<!DOCTYPE html>") and f"ray-doctor {command}" in text
    else:
        assert text.startswith("ray-doctor ") and command in text.splitlines()[0]


def test_help_offers_every_format():
    for command in ("inspect", "verify-checkpoint"):
        text = run_cli(command, "--help", env={"COLUMNS": "200"}).stdout
        choices = text[text.index("--format") :].split("<", 1)[1].split(">", 1)[0]
        assert choices.split("|") == list(FORMATS), command


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_format_from_every_command(fixtures, command):
    name, *args = COMMANDS[command]
    args = [str(fixtures / a) if a.startswith("tune_") else a for a in args]
    expected = run_cli(name, *args, "-f", "json").returncode
    assert expected == 1
    for output_format in FORMATS:
        proc = run_cli(name, *args, "-f", output_format)
        assert proc.returncode == expected, (output_format, proc.stderr)
        assert "Traceback" not in proc.stderr
        looks_like(output_format, proc.stdout, command)
    never = run_cli(name, *args, "-f", "sarif", "--fail-on", "never")
    assert never.returncode == 0


def test_every_format_of_a_smoke_report():
    report = smoke_report()
    for output_format in FORMATS:
        looks_like(
            output_format, make_formatter(output_format, FormatOptions()).render(report), "smoke"
        )


@pytest.mark.parametrize("output_format", [f for f in FORMATS if f != "terminal"])
def test_could_not_run_still_reports(tmp_path, output_format):
    proc = run_cli("inspect", str(tmp_path / "missing"), "-f", output_format)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no such file or directory" in proc.stderr
    looks_like(output_format, proc.stdout, "inspect")


def test_plotly_is_imported_only_for_html(fixtures):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ray_doctor._cli import app\n"
        "for fmt in ('json', 'sarif', 'junit', 'github', 'markdown', 'terminal'):\n"
        "    sys.argv = ['ray-doctor', 'inspect', sys.argv[1], '-q', '-f', fmt]\n"
        "    try:\n"
        "        app()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith(('plotly', 'ray_doctor.report._html'))), file=sys.stderr)\n"
    )
    target = str(fixtures / "tune_trial_error")
    proc = subprocess.run(
        [sys.executable, "-c", code, target], capture_output=True, text=True, timeout=120
    )
    assert "LOADED []" in proc.stderr, proc.stderr[-2000:]
