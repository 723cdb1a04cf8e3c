from __future__ import annotations

import json

from ray_doctor.report._interface import Formatter
from ray_doctor.report._report import Report


class JsonFormatter(Formatter):
    """The machine contract: validates against docs/report.schema.json.

    Indented for people (a terminal); compact otherwise, because the indenting encoder is
    pure Python and costs more than the whole scan on a large sweep.
    """

    name = "json"

    def __init__(self, indent: bool = False) -> None:
        self.indent = indent

    def render(self, report: Report) -> str:
        if self.indent:
            text = json.dumps(report.data, indent=2, ensure_ascii=False, allow_nan=False)
        else:
            text = json.dumps(
                report.data, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            )
        return text + "\n"
