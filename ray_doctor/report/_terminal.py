"""The default human view: header, trial table, findings with evidence and fix, summary."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ray_doctor.report._common import SEVERITY_MARK, STAGE_MARK, short_path
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

    def __init__(self, color: bool = False, width: int = 100, max_rows: int = 20) -> None:
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
            if own:
                yield self._trial_table(own)
        findings = data.get("findings", [])
        if findings:
            yield Text("\nFindings", style="bold")
            for finding in findings:
                yield self._finding(finding)
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
        if experiment.get("state_files", 0) > 1:
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
        shown = ordered if self.max_rows <= 0 else ordered[: self.max_rows]
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
        shown = checkpoints if self.max_rows <= 0 else checkpoints[: self.max_rows]
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

    def _finding(self, finding: dict[str, Any]) -> Group:
        severity = finding["severity"]
        head = Text("\n")
        head.append(f"{SEVERITY_MARK[severity]} {severity}", style=SEVERITY_STYLE[severity])
        head.append(f"  {finding['rule']}", style="bold")
        where = " / ".join(x for x in (finding.get("experiment"), finding.get("trial_id")) if x)
        if where:
            head.append(f"  [{where}]", style="dim")
        parts: list[Any] = [head, self._indent(Text(finding["message"]), 2)]
        if finding["evidence"]:
            parts.append(Text("  evidence:", style="dim"))
            for item in finding["evidence"][:8]:
                location = short_path(item["path"], self._base)
                if item.get("line"):
                    location += f":{item['line']}"
                excerpt = item.get("excerpt") or ""
                if len(location) + len(excerpt) + 6 <= self.width:
                    parts.append(
                        self._indent(Text(location, style="cyan") + Text(f"  {excerpt}"), 4)
                    )
                else:
                    # A long path gets its own line, so neither it nor the excerpt is broken.
                    path_line = Text("    ") + Text(location, style="cyan")
                    path_line.no_wrap, path_line.overflow = True, "ignore"
                    parts.append(path_line)
                    if excerpt:
                        parts.append(self._indent(Text(excerpt), 6))
        parts.append(self._indent(Text.assemble(("fix: ", "bold green"), finding["fix"]), 2))
        for related in finding.get("related", []):
            text = Text(f"also {related['rule']}: {related['message']}", style="dim")
            parts.append(self._indent(text, 2))
        parts.append(self._indent(Text(f"docs: {finding['docs']}", style="dim"), 2))
        return Group(*parts)

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
