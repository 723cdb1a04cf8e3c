"""error.txt: Tune appends one `Failure # N (occurred at <date>)` block per failure."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ray_doctor.model import Evidence, Failure
from ray_doctor.scan._normalise import TextLine, normalise_lines
from ray_doctor.scan._traceback import parse_failure

HEADER = re.compile(r"^Failure # (?P<n>\d+) \(occurred at (?P<time>[^)]*)\)\s*$")
# A block keeps its first and last lines; a failure's meat is at both ends.
BLOCK_HEAD = 200
BLOCK_TAIL = 400


class _Block:
    def __init__(self, number: int | None, time: str | None, header: Evidence | None) -> None:
        self.number = number
        self.time = time
        self.header = header
        self.head: list[tuple[int, str]] = []
        self.tail: list[tuple[int, str]] = []

    def add(self, lineno: int, line: str) -> None:
        if len(self.head) < BLOCK_HEAD:
            self.head.append((lineno, line))
            return
        self.tail.append((lineno, line))
        if len(self.tail) > 2 * BLOCK_TAIL:
            del self.tail[:BLOCK_TAIL]

    def lines(self) -> list[tuple[int, str]]:
        return self.head + self.tail[-BLOCK_TAIL:]


def parse_error_lines(lines: Iterable[str], path: str) -> list[Failure]:
    """Split error text into failures; text before the first header is one failure too."""
    return parse_error_text(normalise_lines(lines), path)


def parse_error_text(lines: Iterable[TextLine], path: str) -> list[Failure]:
    """`parse_error_lines` for text the normaliser has already read."""
    blocks: list[_Block] = []
    current: _Block | None = None
    for text_line in lines:
        lineno, line = text_line.lineno, text_line.text
        header = HEADER.match(line)
        if header:
            evidence = Evidence(path, lineno, line.strip())
            current = _Block(int(header["n"]), header["time"], evidence)
            blocks.append(current)
            continue
        if current is None:
            if not line.strip():
                continue
            current = _Block(None, None, None)
            blocks.append(current)
        current.add(lineno, line)
    failures = []
    for block in blocks:
        failure = parse_failure(block.lines(), path, block.number, block.time)
        if block.header is not None:
            failure.source = block.header
        failures.append(failure)
    return failures
