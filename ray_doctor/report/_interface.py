"""One formatter interface; each output format is one implementation (as in pip-audit)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, TextIO

from ray_doctor.report._report import Report


class Formatter(ABC):
    name: ClassVar[str]

    @abstractmethod
    def render(self, report: Report) -> str:
        """The whole output as text."""

    def write(self, report: Report, stream: TextIO) -> None:
        """Write the output to a stream; formats with big outputs stream it in pieces."""
        stream.write(self.render(report))
