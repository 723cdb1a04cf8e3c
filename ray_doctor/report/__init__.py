"""Reports: one `Report` per command run, rendered by any registered formatter."""

from __future__ import annotations

from importlib import resources

from ray_doctor.report._interface import Formatter
from ray_doctor.report._json import JsonFormatter
from ray_doctor.report._report import (
    FAIL_ON_CHOICES,
    SCHEMA_VERSION,
    STAGE_MARK,
    ExitCode,
    Report,
    build_inspect_report,
    build_smoke_report,
    build_verify_report,
    could_not_run_report,
)

FORMATS = ("terminal", "json")


def __getattr__(name: str):
    # rich is imported only when the terminal view is wanted (json runs skip ~50 ms).
    if name == "TerminalFormatter":
        from ray_doctor.report._terminal import TerminalFormatter

        return TerminalFormatter
    raise AttributeError(name)


def schema_text() -> str:
    """The published JSON Schema of the report (docs/report.schema.json is a copy)."""
    return resources.files("ray_doctor.report").joinpath("report.schema.json").read_text("utf-8")


__all__ = [
    "FAIL_ON_CHOICES",
    "FORMATS",
    "SCHEMA_VERSION",
    "STAGE_MARK",
    "ExitCode",
    "Formatter",
    "JsonFormatter",
    "Report",
    "TerminalFormatter",
    "build_inspect_report",
    "build_smoke_report",
    "build_verify_report",
    "could_not_run_report",
    "schema_text",
]
