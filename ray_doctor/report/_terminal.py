"""The default human view: header, trial table, findings with evidence and fix, summary."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ray_doctor.report._common import SEVERITY_MARK, STAGE_MARK, short_path, unknown_run_note
from ray_doctor.report._groups import (
    FindingGroup,
    finding_groups,
    is_triage,
    ranked_causes,
    representative_evidence,
    wants_summary,
)
from ray_doctor.report._interface import FormatOptions, Formatter
from ray_doctor.report._report import ExitCode, Report

STATUS_STYLE = {
    "ERROR": "bold red",
    "RUNNING": "yellow",
    "PENDING": "yellow",
    "PAUSED": "yellow",
    "TERMINATED": "green",
    "UNKNOWN": "dim",
}
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}
STAGE_STYLE = {"pass": "green", "fail": "bold red", "error": "bold yellow", "skip": "dim"}
# Problem trials first, so a capped table still shows them.
MAX_CAUSES = 8  # lines of the "what happened" block
DEFAULT_ROWS = 20
# When findings are grouped (a failing sweep), the groups name the failed trials: the trial
# table is left out unless --max-rows asks for it, and a lone finding shows less evidence.
TRIAGE_ROWS = -1
TRIAGE_EVIDENCE = 2
STATUS_ORDER = {"ERROR": 0, "RUNNING": 1, "PENDING": 1, "PAUSED": 1, "UNKNOWN": 2, "TERMINATED": 3}


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _append_counts(text: Text, counts: dict[str, int]) -> None:
    """`: 1 ERROR, 2 TERMINATED`, each status in its colour."""
    if counts:
        text.append(": ")
        for i, (status, n) in enumerate(sorted(counts.items())):
            if i:
                text.append(", ")
            text.append(f"{n} {status}", style=STATUS_STYLE.get(status, ""))


class TerminalFormatter(Formatter):
    name = "terminal"

    def __init__(self, color: bool = False, width: int = 100, max_rows: int | None = None) -> None:
        self.color = color
        self.width = width
        self.max_rows = max_rows

    @classmethod
    def from_options(cls, options: FormatOptions) -> TerminalFormatter:
        return cls(options.color, options.width, options.max_rows)

    def render(self, report: Report) -> str:
        target = report.data["target"]["path"]
        # Evidence paths are shown relative to the target, which the header names.
        self._base = target if not target.endswith((".txt", ".log", ".err", ".out")) else None
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            force_terminal=self.color,
            no_color=not self.color,
            width=self.width,
            highlight=False,
            soft_wrap=False,
        )
        self._console = console
        self._groups = finding_groups(report.data)
        self._triage = is_triage(self._groups)
        if self.max_rows is not None:
            self._rows = self.max_rows
        else:
            self._rows = TRIAGE_ROWS if self._triage else DEFAULT_ROWS
        for part in self._parts(report.data):
            console.print(part)
        return buffer.getvalue()

    def _parts(self, data: dict[str, Any]) -> Iterable[Any]:
        yield self._header(data)
        if data.get("command") == "verify-checkpoint":
            yield from self._checkpoints(data)
        if data.get("command") == "smoke":
            yield from self._stages(data)
        experiments = data.get("experiments", [])
        trials = data.get("trials", [])
        for experiment in experiments:
            own = [t for t in trials if t["experiment"] == experiment["name"]]
            yield self._experiment_line(experiment, own)
            note = unknown_run_note(experiment, own)
            if note:
                yield self._indent(Text(f"({note})", style="dim"), 2)
            if own and self._rows < 0:
                yield Text(
                    f"  (trial table left out: --max-rows {DEFAULT_ROWS} shows it)", style="dim"
                )
            elif own:
                yield self._trial_table(own)
        groups = self._groups
        if wants_summary(groups):
            yield self._what_happened(groups)
        if groups:
            yield Text("\nFindings", style="bold")
            for group in groups:
                yield self._finding(group)
        errors = data.get("errors", [])
        if errors:
            heading = "Could not run" if data.get("command") == "smoke" else "Could not read"
            yield Text(f"\n{heading}", style="bold")
            for error in errors[:20]:
                line = Text(f"{short_path(error['path'])}: {error['reason']}", style="yellow")
                yield self._indent(line, 2)
            if len(errors) > 20:
                yield Text(f"  … and {len(errors) - 20} more (see --format json)", style="dim")
        if len(experiments) > 1:
            yield self._combined(data)
        yield self._footer(data)

    def _combined(self, data: dict[str, Any]) -> Text:
        """One line over all experiments of a storage_path."""
        summary = data["summary"]
        text = Text("\n")
        text.append(f"{summary['experiments']} experiments", style="bold")
        text.append(f" · {summary['trials']} trials")
        counts = {s: n for s, n in summary["trials_by_status"].items() if n}
        _append_counts(text, counts)
        flagged = {f["experiment"] for f in data.get("findings", []) if f.get("experiment")}
        text.append(f" · findings in {len(flagged)} of {summary['experiments']}")
        return text

    def _indent(self, text: Text, width: int) -> Text:
        """Wrap `text` to the console width and indent every line (no trailing padding)."""
        lines = text.wrap(self._console, max(20, self.width - width))
        out = Text()
        for i, line in enumerate(lines):
            if i:
                out.append("\n")
            out.append(" " * width)
            line.rstrip()
            out.append_text(line)
        return out

    def _header(self, data: dict[str, Any]) -> Text:
        tool = data["tool"]
        target = data["target"]
        text = Text()
        text.append(f"{tool['name']} {tool['version']}", style="bold")
        text.append(f"  {data['command']} {short_path(target['path'])}")
        if target.get("layout"):
            text.append(f"  [{target['layout']}]", style="dim")
        return text

    def _experiment_line(self, experiment: dict[str, Any], trials: list[dict[str, Any]]) -> Text:
        counts: dict[str, int] = {}
        for trial in trials:
            counts[trial["status"]] = counts.get(trial["status"], 0) + 1
        text = Text("\n")
        text.append(experiment["name"], style="bold")
        text.append(f"  {experiment['layout']}")
        if experiment.get("ray_version"):
            text.append(f" · Ray {experiment['ray_version']}")
        if experiment["layout"] != "log":
            text.append(f" · {len(trials)} trial{'s' if len(trials) != 1 else ''}")
        _append_counts(text, counts)
        earlier = len(experiment.get("earlier_run_trial_dirs") or [])
        if earlier:
            # A new run under a name in use, not a resume: the older dirs are left out.
            text.append(
                f" · {earlier} trial dir{'s' if earlier != 1 else ''} of an earlier run "
                "under this name left out",
                style="dim",
            )
        elif experiment.get("state_files", 0) > 1:
            text.append(f" · resumed ({experiment['state_files']} state files)", style="dim")
        if experiment.get("start_time"):
            text.append(f" · started {experiment['start_time']}", style="dim")
        return text

    def _trial_table(self, trials: list[dict[str, Any]]) -> Group:
        metric_names = {t["metric"]["name"] for t in trials if t.get("metric")}
        metric_header = metric_names.pop() if len(metric_names) == 1 else "metric"
        table = Table(box=None, pad_edge=False, header_style="bold dim")
        table.add_column("trial")
        table.add_column("status")
        table.add_column("iter", justify="right")
        table.add_column(metric_header, justify="right")
        table.add_column("failures", justify="right")
        table.add_column("last checkpoint")
        ordered = sorted(trials, key=lambda t: STATUS_ORDER.get(t["status"], 2))
        shown = ordered if self._rows <= 0 else ordered[: self._rows]
        for trial in shown:
            metric = trial.get("metric")
            value = _number(metric["value"]) if metric else ""
            if metric and metric_header == "metric":
                value = f"{metric['name']}={value}"
            failures = trial["failures"]
            table.add_row(
                escape(trial["trial_id"]),
                Text(trial["status"], style=STATUS_STYLE.get(trial["status"], "")),
                "" if trial["iterations"] is None else str(trial["iterations"]),
                value,
                Text(str(failures), style="red" if failures else "dim"),
                trial["last_checkpoint"] or "",
            )
        parts: list[Any] = [table]
        if len(shown) < len(trials):
            parts.append(
                Text(
                    f"… {len(trials) - len(shown)} more trials (--max-rows 0 shows all)",
                    style="dim",
                )
            )
        return Group(*parts)

    def _checkpoints(self, data: dict[str, Any]) -> Iterable[Any]:
        checkpoints = data.get("checkpoints", [])
        if not checkpoints:
            return
        summary = data["summary"]
        yield Text(
            f"\n{summary['checkpoints']} checkpoint(s), {summary['files']} file(s), "
            f"{summary['tensors']} tensor(s)",
            style="bold",
        )
        table = Table(box=None, pad_edge=False, header_style="bold dim")
        for column in ("checkpoint", "trial", "formats", "tensors", "status"):
            table.add_column(column, justify="right" if column == "tensors" else "left")
        shown = checkpoints if self._rows <= 0 else checkpoints[: self._rows]
        for checkpoint in shown:
            formats = sorted({f["format"] for f in checkpoint["files"] if f["format"] != "other"})
            if checkpoint["problems"]:
                status = Text("problems", style="bold red")
            elif checkpoint.get("latest_restorable"):
                status = Text("ok, latest restorable", style="green")
            else:
                status = Text("ok", style="green")
            name = checkpoint["path"].rstrip("/").rsplit("/", 1)[-1]
            table.add_row(
                escape(
                    name
                    if checkpoint.get("trial_id")
                    else short_path(checkpoint["path"], self._base)
                ),
                checkpoint.get("trial_id") or "",
                ", ".join(formats),
                str(checkpoint["tensors"]),
                status,
            )
        yield table
        if len(shown) < len(checkpoints):
            yield Text(f"… {len(checkpoints) - len(shown)} more", style="dim")
        for item in data.get("latest_restorable", []):
            if item["checkpoint"] is None:
                yield Text(
                    f"  trial {item['trial_id']}: no checkpoint would restore", style="bold red"
                )

    def _stages(self, data: dict[str, Any]) -> Iterable[Any]:
        summary = data["summary"]
        ray = data["target"].get("ray_version")
        line = Text("\n")
        line.append(f"{summary['stages']} stages", style="bold")
        line.append(f" in {summary.get('duration_s', 0):.1f} s" + (f" · Ray {ray}" if ray else ""))
        yield line
        table = Table(box=None, pad_edge=False, show_header=False)
        table.add_column("status", no_wrap=True)
        table.add_column("stage", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        table.add_column("what it found", overflow="fold")
        for stage in data.get("stages", []):
            status = stage["status"]
            table.add_row(
                Text(f"{STAGE_MARK[status]} {status}", style=STAGE_STYLE[status]),
                stage["name"],
                f"{stage['duration_s']:.1f} s" if status != "skip" else "",
                escape(stage["message"]),
            )
        yield table
        kept = (data.get("environment") or {}).get("kept")
        if kept:
            yield Text(
                "kept (--keep): " + ", ".join(f"{k} {v}" for k, v in kept.items()), style="dim"
            )

    def _what_happened(self, groups: list[FindingGroup]) -> Group:
        """Causes ranked by trials affected, one line each, across all experiments."""
        lines: list[Any] = [Text("\nWhat happened", style="bold")]
        ranked = ranked_causes(groups)
        for group in ranked[:MAX_CAUSES]:
            severity = group.lead["severity"]
            line = Text("  ")
            line.append(f"{group.count_label:>12}", style=SEVERITY_STYLE[severity])
            line.append(f"  {group.lead['rule']}", style="bold")
            if group.experiments > 1:
                line.append(f" ({group.experiments} experiments)", style="dim")
            line.append(f"  {group.cause}")
            lines.append(self._line(line, 0))
        if len(ranked) > MAX_CAUSES:
            lines.append(Text(f"  … {len(ranked) - MAX_CAUSES} more causes below", style="dim"))
        return Group(*lines)

    def _finding(self, group: FindingGroup) -> Group:
        if group.size > 1:
            return self._group(group)
        finding = group.lead
        parts: list[Any] = [self._finding_head(group)]
        parts.append(self._indent(Text(finding["message"]), 2))
        if finding["evidence"]:
            parts.append(Text("  evidence:", style="dim"))
            for item in finding["evidence"][: TRIAGE_EVIDENCE if self._triage else 8]:
                parts += self._evidence(item)
        parts.append(self._fix(finding))
        for related in finding.get("related", []):
            text = Text(f"also {related['rule']}: {related['message']}", style="dim")
            parts.append(self._indent(text, 2))
        parts.append(self._indent(Text(f"docs: {finding['docs']}", style="dim"), 2))
        return Group(*parts)

    def _group(self, group: FindingGroup) -> Group:
        """Many findings with one cause, compact: the cause on the heading, the members on a
        line, one line of the representative's (first member's) evidence, one fix."""
        finding = group.lead
        parts: list[Any] = [self._line(self._finding_head(group) + Text(f"  {group.cause}"), 0)]
        members = Text("trials: ", style="dim") + Text(group.members())
        parts.append(self._line(members, 2))
        for item in representative_evidence(finding):
            location = Text(short_path(item["path"], self._base), style="cyan")
            if item.get("line"):
                location.append(f":{item['line']}")
            excerpt = Text(f"  {item.get('excerpt') or ''}")
            parts.append(
                self._line(Text(f"{finding['trial_id'] or 'e.g.'}: ") + location + excerpt, 2)
            )
        parts.append(self._fix(finding))
        docs = f"docs: {finding['docs']}"
        related = sorted({r["rule"] for f in group.findings for r in f.get("related", [])})
        if related:
            docs += f" · also: {', '.join(related)}"
        parts.append(self._line(Text(docs, style="dim"), 2))
        return Group(*parts)

    def _finding_head(self, group: FindingGroup) -> Text:
        finding = group.lead
        severity = finding["severity"]
        head = Text("\n")
        head.append(f"{SEVERITY_MARK[severity]} {severity}", style=SEVERITY_STYLE[severity])
        head.append(f"  {finding['rule']}", style="bold")
        if group.size > 1:
            head.append(f" x {group.count_label}", style=SEVERITY_STYLE[severity])
            where = None  # the members line names the trials (with experiments when several)
        else:
            where = " / ".join(x for x in (finding.get("experiment"), finding.get("trial_id")) if x)
        if where:
            head.append(f"  [{where}]", style="dim")
        return head

    def _evidence(self, item: dict[str, Any]) -> list[Text]:
        location = short_path(item["path"], self._base)
        if item.get("line"):
            location += f":{item['line']}"
        excerpt = item.get("excerpt") or ""
        if len(location) + len(excerpt) + 6 <= self.width:
            return [self._indent(Text(location, style="cyan") + Text(f"  {excerpt}"), 4)]
        # A long path gets its own line, so neither it nor the excerpt is broken.
        path_line = Text("    ") + Text(location, style="cyan")
        path_line.no_wrap, path_line.overflow = True, "ignore"
        return [path_line] + ([self._indent(Text(excerpt), 6)] if excerpt else [])

    def _fix(self, finding: dict[str, Any]) -> Text:
        return self._indent(Text.assemble(("fix: ", "bold green"), finding["fix"]), 2)

    def _line(self, text: Text, width: int) -> Text:
        """`text` indented on one line, cut with an ellipsis at the console width."""
        line = Text(" " * width) + text
        line.truncate(self.width, overflow="ellipsis")
        return line

    def _footer(self, data: dict[str, Any]) -> Text:
        summary = data["summary"]
        counts = summary["findings_by_severity"]
        code = summary["exit_code"]
        text = Text("\n")
        if code == ExitCode.NOTHING_TO_INSPECT:
            text.append("No Ray experiment data found here.", style="bold yellow")
            text.append(f"  exit {code}")
            return text
        parts = [
            (f"{counts['error']} error{'s' if counts['error'] != 1 else ''}", "error"),
            (f"{counts['warning']} warning{'s' if counts['warning'] != 1 else ''}", "warning"),
            (f"{counts['info']} info", "info"),
        ]
        for i, (label, severity) in enumerate(parts):
            if i:
                text.append(" · ")
            text.append(label, style=SEVERITY_STYLE[severity] if counts[severity] else "dim")
        text.append(f"  exit {code} (--fail-on {summary['fail_on']})", style="dim")
        return text
