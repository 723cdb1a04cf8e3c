"""One formatter interface; each output format is one implementation (as in pip-audit)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TextIO

if TYPE_CHECKING:
    from ray_doctor.report._report import Report


@dataclass(frozen=True)
class FormatOptions:
    """What the command line knows that formatters may use; each takes what it needs."""

    color: bool = False
    width: int = 100
    max_rows: int | None = None  # terminal trial rows (0: all; None: 20, 5 when grouped)
    indent: bool = False  # JSON for people
    # The dir CI checked out (GITHUB_WORKSPACE, else the cwd): paths below it are written
    # relative to it, the way code scanning and annotations anchor them in the repository.
    workspace: str | None = None
    # GitHub's $GITHUB_STEP_SUMMARY: the github format appends its Markdown summary there.
    step_summary: str | None = None


class FormatUnavailable(Exception):
    """The format cannot be produced here (a library it needs is missing); the CLI says why."""


class Formatter(ABC):
    name: ClassVar[str]
    # A file for a browser, never for a terminal: the CLI refuses to print it to a TTY.
    wants_file: ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: FormatOptions) -> Formatter:
        return cls()

    @abstractmethod
    def render(self, report: Report) -> str:
        """The whole output as text."""

    def write(self, report: Report, stream: TextIO) -> None:
        """Write the output to a stream; formats with big outputs stream it in pieces."""
        stream.write(self.render(report))
