from __future__ import annotations

import json
from typing import TextIO

from ray_doctor.report._interface import FormatOptions, Formatter
from ray_doctor.report._report import Report

# One encoder for every item: json.dumps with options builds a new one per call (10,000+ calls).
_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_dumps = _COMPACT.encode


class JsonFormatter(Formatter):
    """The machine contract: validates against docs/report.schema.json.

    Indented for people (a terminal); compact otherwise, because the indenting encoder is
    pure Python and costs more than the whole scan on a large sweep. Compact output is
    written item by item, so a 10,000-trial report never exists as one string.
    """

    name = "json"

    def __init__(self, indent: bool = False) -> None:
        self.indent = indent

    @classmethod
    def from_options(cls, options: FormatOptions) -> JsonFormatter:
        return cls(indent=options.indent)

    def render(self, report: Report) -> str:
        if self.indent:
            text = json.dumps(report.data, indent=2, ensure_ascii=False, allow_nan=False)
        else:
            text = _dumps(report.data)
        return text + "\n"

    def write(self, report: Report, stream: TextIO) -> None:
        if self.indent:
            stream.write(self.render(report))
            return
        stream.write("{")
        for i, (key, value) in enumerate(report.data.items()):
            stream.write(("," if i else "") + _dumps(key) + ":")
            if isinstance(value, list):
                stream.write("[")
                for j, item in enumerate(value):
                    stream.write(("," if j else "") + _dumps(item))
                stream.write("]")
            else:
                stream.write(_dumps(value))
        stream.write("}\n")
