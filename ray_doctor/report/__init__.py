"""Reports: one `Report` per command run, rendered by any registered formatter.

Names load lazily (PEP 562), so the CLI can read the format names for --help without
importing the report model or any formatter.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ray_doctor.report._registry import FORMATS, formatter_class, make_formatter

_LAZY = {
    "FAIL_ON_CHOICES": "_report",
    "SCHEMA_VERSION": "_report",
    "ExitCode": "_report",
    "Report": "_report",
    "build_inspect_report": "_report",
    "build_smoke_report": "_report",
    "build_verify_report": "_report",
    "could_not_run_report": "_report",
    "Formatter": "_interface",
    "FormatOptions": "_interface",
    "JsonFormatter": "_json",
    "TerminalFormatter": "_terminal",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"ray_doctor.report.{_LAZY[name]}"), name)
    raise AttributeError(name)


def schema_text() -> str:
    """The published JSON Schema of the report (docs/report.schema.json is a copy)."""
    from importlib import resources  # ~10 ms: only for the commands that read it

    return resources.files("ray_doctor.report").joinpath("report.schema.json").read_text("utf-8")


__all__ = [  # the lazy names resolve through __getattr__
    "FAIL_ON_CHOICES",
    "FORMATS",
    "SCHEMA_VERSION",
    "ExitCode",
    "FormatOptions",
    "Formatter",
    "JsonFormatter",
    "Report",
    "TerminalFormatter",
    "build_inspect_report",
    "build_smoke_report",
    "build_verify_report",
    "could_not_run_report",
    "formatter_class",
    "make_formatter",
    "schema_text",
]
