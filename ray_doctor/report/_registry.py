"""Every output format, by name, in one place. Importing this module imports no formatter:
each is loaded only when chosen (the HTML one brings plotly, the terminal one rich)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray_doctor.report._interface import FormatOptions, Formatter

# name -> "module:class". The order is the order --help lists them in.
FORMATTERS: dict[str, str] = {
    "terminal": "ray_doctor.report._terminal:TerminalFormatter",
    "json": "ray_doctor.report._json:JsonFormatter",
    "sarif": "ray_doctor.report._sarif:SarifFormatter",
    "junit": "ray_doctor.report._junit:JunitFormatter",
    "github": "ray_doctor.report._github:GithubFormatter",
    "markdown": "ray_doctor.report._markdown:MarkdownFormatter",
    "html": "ray_doctor.report._html:HtmlFormatter",
}
FORMATS = tuple(FORMATTERS)


def formatter_class(name: str) -> type[Formatter]:
    if name not in FORMATTERS:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
    module, _, attribute = FORMATTERS[name].partition(":")
    return getattr(import_module(module), attribute)


def make_formatter(name: str, options: FormatOptions) -> Formatter:
    return formatter_class(name).from_options(options)
