"""--format markdown: the summary for a PR comment, most important first, inert text."""

from __future__ import annotations

import re

from conftest import experiment_dir, run_cli
from samples import inspect_report, smoke_report, verify_report

from ray_doctor.report._markdown import MarkdownFormatter


def test_inspect_summary_most_important_first(fixtures):
    text = MarkdownFormatter().render(inspect_report(fixtures / "tune_config_correlated"))
    lines = text.splitlines()
    assert lines[0] == "### ✖ ray-doctor inspect: failed: findings at or above --fail-on error"
    assert "**4 errors · 1 warning · 0 info**" in lines[2]
    assert text.index("| ✖ error |") < text.index("| ▲ warning |") < text.index("<details>")
    assert "**Fix:**" in text and "```text" in text
    assert "<details><summary>Trials (8)</summary>" in text


def test_text_cannot_break_tables_or_inject_html(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    report.data["findings"][0]["message"] = "a | b <script>alert(1)</script>\nnext"
    report.data["findings"][0]["evidence"][0]["excerpt"] = "```` fence ````"
    text = MarkdownFormatter().render(report)
    row = next(line for line in text.splitlines() if line.startswith("| ✖ error"))
    assert "a \\| b &lt;script&gt;alert(1)&lt;/script&gt; next" in row
    cells = re.split(r"(?<!\\)\|", row)[1:-1]
    assert len(cells) == 4, "the escaped pipe does not split a cell"
    assert "<script>" not in text
    assert "`````text" in text, "a fence longer than any run of backticks inside"


def test_fits_a_byte_budget(fixtures):
    report = inspect_report(fixtures / "tune_config_correlated")
    text = MarkdownFormatter(max_bytes=2500).render(report)
    assert len(text.encode()) <= 2500
    assert "left out to stay under 2,500 bytes" in text
    assert text.startswith("### ✖ ray-doctor inspect")


def test_smoke_and_verify(fixtures):
    smoke = MarkdownFormatter().render(smoke_report())
    assert "| ⚠ | `collective` | error | 30.0 s |" in smoke
    assert "| ○ | `device` | skip |" in smoke
    verify = MarkdownFormatter().render(
        verify_report(experiment_dir(fixtures, "tune_corrupt_checkpoint"))
    )
    assert (
        "checkpoint-corrupt" in verify and "<details><summary>Checkpoints (3)</summary>" in verify
    )


def test_cli(fixtures):
    proc = run_cli(
        "verify-checkpoint", "--all", str(fixtures / "tune_corrupt_checkpoint"), "-f", "markdown"
    )
    assert proc.returncode == 1 and proc.stdout.startswith("### ✖ ray-doctor verify-checkpoint")
