"""GitHub Actions: `::error` / `::warning` / `::notice` workflow commands for the top findings,
and, when $GITHUB_STEP_SUMMARY is set, the Markdown summary appended to that file.

GitHub shows about ten annotations of each kind per step, so the first ten of each severity
become annotations and one notice says where the rest are. Values are escaped the way
actions/toolkit does: `%`, CR and LF everywhere; `:` and `,` too inside properties, where
they would end a property or the property list.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from ray_doctor.report._common import anchor, below, counts_line, local_path, verdict
from ray_doctor.report._groups import FindingGroup, finding_groups, subject
from ray_doctor.report._groups import message as group_message
from ray_doctor.report._interface import FormatOptions, Formatter
from ray_doctor.report._markdown import STEP_SUMMARY_LIMIT, MarkdownFormatter
from ray_doctor.report._report import Report

COMMAND = {"error": "error", "warning": "warning", "info": "notice"}
MAX_PER_KIND = 10
MIN_SUMMARY_BYTES = 4096  # below this there is no room left for a useful summary


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def workflow_command(kind: str, message: str, **properties: Any) -> str:
    """`::kind key=value,...::message`, with None-valued properties left out."""
    props = ",".join(
        f"{key}={escape_property(str(value))}"
        for key, value in properties.items()
        if value is not None
    )
    return f"::{kind}{' ' + props if props else ''}::{escape_data(message)}"


class GithubFormatter(Formatter):
    name = "github"

    def __init__(
        self,
        workspace: str | None = None,
        step_summary: str | None = None,
        max_per_kind: int = MAX_PER_KIND,
    ) -> None:
        self.workspace = workspace
        self.step_summary = step_summary
        self.max_per_kind = max_per_kind

    @classmethod
    def from_options(cls, options: FormatOptions) -> GithubFormatter:
        return cls(workspace=options.workspace, step_summary=options.step_summary)

    def render(self, report: Report) -> str:
        return "".join(line + "\n" for line in self._lines(report.data))

    def write(self, report: Report, stream: TextIO) -> None:
        stream.write(self.render(report))
        if self.step_summary:
            self._append_summary(report)

    def _lines(self, data: dict[str, Any]) -> list[str]:
        self._data = data
        lines: list[str] = []
        shown = dict.fromkeys(COMMAND, 0)
        hidden = 0
        for group in finding_groups(data):  # one annotation per cause, not per trial
            severity = group.lead["severity"]
            if shown[severity] >= self.max_per_kind:
                hidden += group.size
                continue
            shown[severity] += 1
            lines.append(self._annotation(group))
        if data["summary"]["exit_code"] == 2:
            for error in data["errors"]:
                reason = f"ray-doctor {data['command']} could not run: {error['reason']}"
                lines.append(workflow_command("error", reason, title="ray-doctor"))
        if hidden:
            where = "the job summary" if self.step_summary else "--format markdown or json"
            message = f"{hidden:,} more findings are not annotated here: see {where}."
            lines.append(workflow_command("notice", message, title="ray-doctor"))
        lines.append(f"ray-doctor {data['command']}: {verdict(data)} ({counts_line(data)})")
        return lines

    def _annotation(self, group: FindingGroup) -> str:
        finding = group.lead
        evidence = anchor(self._data, finding["evidence"], self.workspace)
        file = line = None
        path = local_path(evidence["path"]) if evidence else None
        if evidence is not None and path is not None:  # a node or a URI annotates no file
            file = below(path, self.workspace) or path
            line = evidence.get("line")
        about = subject(group)
        title = f"{finding['rule']}: {finding['title']}" + (f" [{about}]" if about else "")
        message = f"{group_message(group)}\nFix: {finding['fix']}"
        return workflow_command(
            COMMAND[finding["severity"]], message, file=file, line=line, title=title
        )

    def _append_summary(self, report: Report) -> None:
        """Append, never overwrite: earlier steps' tools write to the same file."""
        path = self.step_summary
        try:
            used = os.path.getsize(path) if os.path.exists(path) else 0
            budget = STEP_SUMMARY_LIMIT - used
            if budget < MIN_SUMMARY_BYTES:
                sys.stderr.write("ray-doctor: the step summary is full; not adding to it\n")
                return
            text = MarkdownFormatter(max_bytes=budget - 2).render(report)
            with open(path, "a", encoding="utf-8") as stream:
                stream.write(("\n" if used else "") + text)
        except OSError as exc:
            sys.stderr.write(
                f"ray-doctor: cannot append to GITHUB_STEP_SUMMARY {path}: {exc.strerror or exc}\n"
            )
