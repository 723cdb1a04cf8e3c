from __future__ import annotations

import json

from ray_doctor.report._interface import Formatter
from ray_doctor.report._report import Report


class JsonFormatter(Formatter):
    """The machine contract: validates against docs/report.schema.json."""

    name = "json"

    def render(self, report: Report) -> str:
        return json.dumps(report.data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
