"""--format github: workflow commands escaped the way GitHub parses them, at most ten
annotations a kind, and the Markdown summary appended to $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import copy
import re

from conftest import run_cli
from samples import inspect_report, smoke_report

from ray_doctor.report._github import (
    GithubFormatter,
    escape_data,
    escape_property,
    workflow_command,
)
from ray_doctor.report._groups import group_id
from ray_doctor.report._markdown import STEP_SUMMARY_LIMIT

HOSTILE = "100% done,\r\nkey: value, next::line %0A"
COMMAND = re.compile(r"^::(error|warning|notice)(?: (?P<props>[^:]*))?::(?P<message>.*)$")


def unescape(text: str) -> str:
    """What the runner does with an escaped value (actions/runner's unescape order)."""
    for escaped, raw in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(escaped, raw)
    return text


def parse(line: str) -> tuple[str, dict[str, str], str]:
    match = COMMAND.match(line)
    assert match, line
    props = {}
    for pair in (match["props"] or "").split(","):
        if pair:
            key, _, value = pair.partition("=")
            props[key] = unescape(value)
    return match[1], props, unescape(match["message"])


def test_escaping_matches_the_toolkit():
    assert escape_data(HOSTILE) == "100%25 done,%0D%0Akey: value, next::line %250A"
    assert escape_property(HOSTILE) == "100%25 done%2C%0D%0Akey%3A value%2C next%3A%3Aline %250A"


def test_hostile_file_title_and_message_round_trip():
    file = "/work/exp,1/trial:a%b/error.txt"
    title = "rule: a, b\r\nc"
    line = workflow_command("error", HOSTILE, file=file, line=7, title=title)
    assert "\n" not in line and "\r" not in line
    kind, props, message = parse(line)
    assert kind == "error" and message == HOSTILE
    assert props == {"file": file, "line": "7", "title": title}


def test_annotations_for_the_findings(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    lines = GithubFormatter(workspace=str(fixtures)).render(report).splitlines()
    kind, props, message = parse(lines[0])
    assert kind == "error"
    assert props["file"].startswith("tune_trial_error/ray_results/") and props["file"].endswith(
        "error.txt"
    )
    assert props["line"] == "1"
    assert props["title"] == "trial-error: Trial failed [tune_trial_error / b0523_00002]"
    assert "ValueError: lr=0.1 is too large" in message and "\nFix: " in message
    assert lines[-1].startswith("ray-doctor inspect: failed")


def test_hostile_finding_text_stays_one_command(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    finding = report.data["findings"][0]
    finding["message"] = HOSTILE
    finding["title"] = "a,b:c"
    output = GithubFormatter(workspace=str(fixtures)).render(report)
    _, props, message = parse(output.splitlines()[0])
    assert message.startswith(HOSTILE) and props["title"].startswith("trial-error: a,b:c")


def test_evidence_that_is_not_a_file_annotates_no_file():
    lines = GithubFormatter().render(smoke_report()).splitlines()
    for line in lines[:-1]:
        _, props, _ = parse(line)
        assert "file" not in props


def _copies(finding: dict, count: int, distinct: bool) -> list[dict]:
    """`count` copies of a finding, each with its own trial id; with `distinct`, each also
    with its own cause (a word that differs, so the masking of numbers keeps them apart)."""
    copies = []
    for i in range(count):
        item = copy.deepcopy(finding)
        item["trial_id"] = f"b0523_{i:05d}"
        item["message"] = item["message"].replace(finding["trial_id"], item["trial_id"])
        if distinct:
            item["message"] += " " + "abcdefghijklmnopqrstuvwxyz"[i] * 3
        item["group"] = group_id(item)
        copies.append(item)
    return copies


def test_at_most_ten_annotations_a_kind(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    (finding,) = report.data["findings"]
    report.data["findings"] = _copies(finding, 25, distinct=True)
    lines = GithubFormatter().render(report).splitlines()
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == 10
    _, _, message = parse(next(line for line in lines if line.startswith("::notice")))
    assert message.startswith("15 more findings are not annotated here")


def test_one_annotation_for_trials_that_failed_the_same_way(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    (finding,) = report.data["findings"]
    report.data["findings"] = _copies(finding, 25, distinct=False)
    lines = GithubFormatter().render(report).splitlines()
    (error,) = [line for line in lines if line.startswith("::error ")]
    _, props, message = parse(error)
    assert "[25 trials: b0523_00000, b0523_00001" in props["title"]
    assert props["title"].endswith("+20 more]")
    assert message.startswith("Failed with ValueError: lr=0.1 is too large")


def test_step_summary_is_appended_never_clobbered(fixtures, tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("## Tests\n\nall green\n")
    report = inspect_report(fixtures / "tune_trial_error")
    formatter = GithubFormatter(step_summary=str(summary))
    import io

    for _ in range(2):
        formatter.write(report, io.StringIO())
    text = summary.read_text()
    assert text.startswith("## Tests\n\nall green\n")
    assert text.count("### ✖ ray-doctor inspect: failed") == 2
    assert "<details><summary>✖ <code>trial-error</code>" in text


def test_step_summary_stays_under_githubs_limit(fixtures, tmp_path):
    summary = tmp_path / "step_summary.md"
    # Room for a summary (>= 4 KB) but not for all of this one's sections.
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - 4200))
    report = inspect_report(fixtures / "tune_config_correlated")
    import io

    GithubFormatter(step_summary=str(summary)).write(report, io.StringIO())
    size = summary.stat().st_size
    assert STEP_SUMMARY_LIMIT - 4200 < size <= STEP_SUMMARY_LIMIT
    assert "left out to stay under" in summary.read_text()


def test_cli_with_github_env(fixtures, tmp_path):
    summary = tmp_path / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(fixtures)}
    proc = run_cli("inspect", str(fixtures / "tune_trial_error"), "-f", "github", env=env)
    assert proc.returncode == 1
    _, props, _ = parse(proc.stdout.splitlines()[0])
    assert props["file"].startswith("tune_trial_error/")
    assert "ray-doctor inspect" in summary.read_text()
    unwritable = tmp_path / "missing-dir" / "summary.md"
    env["GITHUB_STEP_SUMMARY"] = str(unwritable)
    proc = run_cli("inspect", str(fixtures / "tune_trial_error"), "-f", "github", env=env)
    assert proc.returncode == 1, "a summary that cannot be written does not change the verdict"
    assert "cannot append to GITHUB_STEP_SUMMARY" in proc.stderr and "Traceback" not in proc.stderr
