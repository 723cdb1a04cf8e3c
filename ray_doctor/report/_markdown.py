"""GitHub-flavoured Markdown: a PR comment, or the job's step summary (the github format
appends it to $GITHUB_STEP_SUMMARY).

Most important first: the verdict and counts, a table of the findings, then each finding
folded in <details> with its evidence and fix, then the trials (or checkpoints, or smoke
stages). It fits a byte budget (GitHub drops a step summary over 1 MiB): what does not fit is
counted, never cut mid-way.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

from ray_doctor.report._common import (
    SEVERITY_MARK,
    STAGE_MARK,
    STATUS_ORDER,
    checkpoint_status,
    counts_line,
    docs_link,
    evidence_base,
    location,
    plural,
    short_path,
    subject_line,
    unknown_run_note,
    verdict,
    where,
)
from ray_doctor.report._groups import (
    FindingGroup,
    finding_groups,
    message,
    ranked_causes,
    subject,
    wants_summary,
)
from ray_doctor.report._interface import Formatter
from ray_doctor.report._report import Report

STEP_SUMMARY_LIMIT = 1024 * 1024  # GitHub's cap for one step's summary
MAX_TABLE_FINDINGS = 50
MAX_DETAILED = 50
MAX_ROWS = 50
MAX_CAUSES = 10


def text(value: Any) -> str:
    """Plain text made inert in Markdown and HTML: no tags, no accidental table breaks."""
    return (
        html.escape(str(value), quote=False)
        .replace("|", "\\|")
        .replace("\n", " ")
        .replace("\r", " ")
    )


def fenced(lines: list[str], info: str = "text") -> str:
    """A code block whose fence no line can close early."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence + info, *lines, fence])


def link(label: str, url: str) -> str:
    return f"[{label}]({url})" if "://" in url else label


class MarkdownFormatter(Formatter):
    name = "markdown"

    def __init__(self, max_bytes: int = STEP_SUMMARY_LIMIT) -> None:
        self.max_bytes = max_bytes

    def render(self, report: Report) -> str:
        data = report.data
        out: list[str] = []
        used = 0
        left_out = 0
        for block in _blocks(data):
            size = len(block.encode("utf-8")) + 2
            if used + size > self.max_bytes - 200:  # room for the note below
                left_out += 1
                continue
            out.append(block)
            used += size
        if left_out:
            out.append(
                f"_{plural(left_out, 'section')} left out to stay under "
                f"{self.max_bytes:,} bytes; `--format json` has everything._"
            )
        return "\n\n".join(out) + "\n"


def _blocks(data: dict[str, Any]) -> Iterator[str]:
    yield from _head(data)
    if data.get("stages"):
        yield _stage_table(data)
    groups = finding_groups(data)
    if wants_summary(groups):
        yield _what_happened(groups)
    if groups:
        yield _finding_table(groups)
        base = evidence_base(data)
        for group in groups[:MAX_DETAILED]:
            yield _finding_details(group, base)
        if len(groups) > MAX_DETAILED:
            yield f"_{len(groups) - MAX_DETAILED:,} more findings: see `--format json`._"
    if data.get("trials"):
        yield _trial_table(data)
    if data.get("checkpoints"):
        yield _checkpoint_table(data)
    if data["errors"]:
        yield _errors(data)
    tool = data["tool"]
    yield (
        f"<sub>{tool['name']} {tool['version']} · report schema {data['schema_version']}"
        f" · {data.get('generated_at') or ''}</sub>"
    )


def _head(data: dict[str, Any]) -> Iterator[str]:
    summary = data["summary"]
    code = summary["exit_code"]
    mark = {0: "✔", 1: "✖", 2: "⚠", 3: "○"}.get(code, "")
    yield f"### {mark} ray-doctor {data['command']}: {verdict(data)}"
    facts = [f"`{text(subject_line(data))}`"]
    if data["command"] == "inspect":
        by_status = ", ".join(f"{n} {s}" for s, n in summary["trials_by_status"].items() if n)
        facts.append(
            f"{plural(summary['trials'], 'trial')}" + (f" ({by_status})" if by_status else "")
        )
    elif data["command"] == "verify-checkpoint":
        facts.append(plural(summary["checkpoints"], "checkpoint"))
    elif data["command"] == "smoke":
        by_status = ", ".join(f"{n} {s}" for s, n in summary["stages_by_status"].items() if n)
        facts.append(f"{plural(summary['stages'], 'stage')} ({by_status})")
    if code != 2:
        facts.append(f"**{counts_line(data)}**")
    facts.append(f"exit {code}")
    yield " · ".join(facts)
    trials = data.get("trials", [])
    for experiment in data.get("experiments", []):
        own = [t for t in trials if t["experiment"] == experiment["name"]]
        note = unknown_run_note(experiment, own)
        if note:
            yield f"_{text(experiment['name'])}: {text(note)}._"


def _what_happened(groups: list[FindingGroup]) -> str:
    """Causes ranked by trials affected, across every experiment of the report."""
    lines = ["**What happened**", ""]
    ranked = ranked_causes(groups)
    for group in ranked[:MAX_CAUSES]:
        where_text = f" in {group.experiments} experiments" if group.experiments > 1 else ""
        lines.append(
            f"- **{group.count_label}**{where_text}: `{group.lead['rule']}`: {text(group.cause)}"
        )
    if len(ranked) > MAX_CAUSES:
        lines.append(f"- _… {len(ranked) - MAX_CAUSES:,} more causes below_")
    return "\n".join(lines)


def _finding_table(groups: list[FindingGroup]) -> str:
    rows = ["| | rule | where | finding |", "|---|---|---|---|"]
    for group in groups[:MAX_TABLE_FINDINGS]:
        finding = group.lead
        severity = finding["severity"]
        rule = link(f"`{finding['rule']}`", docs_link(finding["docs"]))
        rows.append(
            f"| {SEVERITY_MARK[severity]} {severity} | {rule} "
            f"| {text(subject(group)) or '—'} | {text(message(group))} |"
        )
    if len(groups) > MAX_TABLE_FINDINGS:
        rows.append(f"| | | | _… {len(groups) - MAX_TABLE_FINDINGS:,} more_ |")
    return "\n".join(rows)


def _finding_details(group: FindingGroup, base: str | None) -> str:
    finding = group.lead
    severity = finding["severity"]
    about = html.escape(where(finding) if group.size == 1 else group.count_label)
    summary = (
        f"{SEVERITY_MARK[severity]} <code>{html.escape(finding['rule'])}</code> "
        f"{html.escape(finding['title'])}" + (f" — {about}" if about else "")
    )
    parts = [f"<details><summary>{summary}</summary>", "", text(message(group))]
    if group.size > 1:
        parts += ["", f"Trials: {text(group.members())}"]
    if finding["evidence"]:
        lines = [
            f"{location(e, base)}  {e.get('excerpt') or ''}".rstrip() for e in finding["evidence"]
        ]
        label = "Evidence:" if group.size == 1 else f"Evidence of {finding['trial_id']}:"
        parts += ["", label, "", fenced(lines)]
    parts += ["", f"**Fix:** {text(finding['fix'])}"]
    for related in finding.get("related", []):
        parts += ["", f"_Also `{related['rule']}`:_ {text(related['message'])}"]
    parts += ["", f"Docs: {link(finding['docs'], docs_link(finding['docs']))}", "", "</details>"]
    return "\n".join(parts)


def _folded(title: str, body: str) -> str:
    return f"<details><summary>{html.escape(title)}</summary>\n\n{body}\n\n</details>"


def _trial_table(data: dict[str, Any]) -> str:
    trials = sorted(data["trials"], key=lambda t: STATUS_ORDER.get(t["status"], 2))
    rows = [
        "| trial | status | iter | metric | failures | restarts | last checkpoint |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for trial in trials[:MAX_ROWS]:
        metric = trial.get("metric")
        value = f"{metric['name']}={_number(metric['value'])}" if metric else ""
        rows.append(
            f"| {text(trial['experiment'])} / {text(trial['trial_id'])} | {trial['status']} "
            f"| {'' if trial['iterations'] is None else trial['iterations']} | {text(value)} "
            f"| {trial['failures']} | {trial['restarts']} | {text(trial['last_checkpoint'] or '')} |"
        )
    if len(trials) > MAX_ROWS:
        rows.append(
            f"| _… {len(trials) - MAX_ROWS:,} more (problem trials are listed first)_ | | | | | | |"
        )
    return _folded(f"Trials ({len(trials):,})", "\n".join(rows))


def _checkpoint_table(data: dict[str, Any]) -> str:
    base = evidence_base(data)
    rows = ["| checkpoint | trial | tensors | status |", "|---|---|---:|---|"]
    checkpoints = data["checkpoints"]
    for checkpoint in checkpoints[:MAX_ROWS]:
        status = checkpoint_status(checkpoint)
        rows.append(
            f"| {text(short_path(checkpoint['path'], base))} | {text(checkpoint.get('trial_id') or '')} "
            f"| {checkpoint['tensors']} | {status} |"
        )
    if len(checkpoints) > MAX_ROWS:
        rows.append(f"| _… {len(checkpoints) - MAX_ROWS:,} more_ | | | |")
    return _folded(f"Checkpoints ({len(checkpoints):,})", "\n".join(rows))


def _stage_table(data: dict[str, Any]) -> str:
    rows = ["| | stage | status | time | message |", "|---|---|---|---:|---|"]
    for stage in data["stages"]:
        rows.append(
            f"| {STAGE_MARK.get(stage['status'], '')} | `{stage['name']}` | {stage['status']} "
            f"| {stage['duration_s']:.1f} s | {text(stage['message'] or stage['title'])} |"
        )
    return "\n".join(rows)


def _errors(data: dict[str, Any]) -> str:
    errors = data["errors"]
    lines = [f"- `{text(short_path(e['path']))}`: {text(e['reason'])}" for e in errors[:MAX_ROWS]]
    if len(errors) > MAX_ROWS:
        lines.append(f"- … {len(errors) - MAX_ROWS:,} more")
    if data["summary"]["exit_code"] == 2:
        return "**Could not run:**\n\n" + "\n".join(lines)
    return _folded(f"Could not read ({len(errors):,})", "\n".join(lines))


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
