"""Numbered lines of a stored log, with a jump over lines that cannot matter.

A log reader that has kept all the events a file may give (`scan/_logs.py`) only wants the
lines that may open a traceback. Finding the next one in the raw bytes with `bytes.find` (C
speed, one pass per needle per buffer) instead of decoding, cleaning and testing every line in
Python is what makes the rest of a 100 MB raylet.out nearly free. The lines passed over still
count for line numbers, and the last few are handed back as the reader's context.

A run's death is written at the end of its logs, after hours of chatter that fill a reader's
event cap long before: the source keeps the last `tail` bytes it read (the buffers themselves,
no copy), and `tail_lines()` hands them out numbered once the file is read to its end.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

MAX_LINE = 1 << 20  # longer lines are cut, as `Storage.iter_lines` cuts them

# What makes a line worth handing out: a byte string anywhere in it, or a pattern whose
# match starts with the newline before the line (`\n` then what the line may start with:
# searched from that newline, which keeps `re`'s fast literal-prefix scan) and ends in it.
Opener = bytes | re.Pattern[bytes]


class Selector(Protocol):
    """Picks, from a run of whole lines, the ones a reader must see (`LineSource.select`)."""

    # How many bytes of whole lines to ask about next (at least one line is always given).
    region_bytes: int

    def select(self, region: bytes) -> list[int] | None:
        """Where the lines to hand out start in `region` (whole lines, each ending with a
        newline), ascending; None: all of them. Called on consecutive regions, in order."""
        ...


ALL: list[int] = []  # a plan that hands out every line (by identity)


class LineSource:
    """(line number, decoded line) pairs of a file's chunks. Before each line it hands out,
    when `should_skip()` says so, it passes over whole lines none of `openers` finds and
    keeps the last non-blank ones it passed in `passed_over` for the caller to take."""

    def __init__(
        self,
        chunks: Iterator[bytes],
        openers: tuple[Opener, ...] = (),
        max_line: int = MAX_LINE,
        keep: int = 6,
        tail: int = 0,
    ) -> None:
        self._chunks = chunks
        self._openers = openers
        self._max_line = max_line
        self._keep = keep
        self._buf = b""
        self._pos = 0  # where the next line starts in _buf
        self._eof = False
        self._lineno = 0  # the number of the last line handed out or passed over
        self._cutting = False  # inside an overlong line whose head was handed out
        self._next_hit: dict[Opener, int] = {}  # per opener: its next hit in _buf, -1: none
        self.should_skip: Callable[[], bool] | None = None
        # While no `should_skip` is set: from line `select_from` on, only the lines `select`
        # picks in each buffer's whole lines are handed out (the rest are counted).
        self.select: Selector | None = None
        self.select_from = 0
        self._plan: list[int] = ALL  # where the picked lines of the planned region start in _buf
        self._plan_next = 0  # the first of them not yet reached
        self._plan_end = -1  # where the planned region ends in _buf (-1: none planned)
        self.passed_over: list[tuple[int, str]] = []
        self.lines_passed_over = 0
        self._tail_limit = tail
        self._tail: deque[bytes] = deque()  # the last chunks read, `tail` bytes and a chunk
        self._tail_size = 0
        self._dropped_newlines = 0  # line ends in the chunks dropped from the tail's front
        self._dropped_ends_line = True  # the last chunk dropped ended with a line end

    def __iter__(self) -> LineSource:
        return self

    def __next__(self) -> tuple[int, str]:
        if self.should_skip is not None:
            if self._openers and self.should_skip():
                self._skip()
        elif self.select is not None and self._lineno >= self.select_from and not self._cutting:
            self._follow_plan()
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end == -1:
                if len(self._buf) - self._pos > self._max_line:
                    return self._overlong()
                if self._fill():
                    continue
                if self._pos >= len(self._buf):
                    raise StopIteration
                end = len(self._buf)  # the last line, without a newline
            raw = self._buf[self._pos : end]
            self._pos = end + 1
            if self._cutting:  # the rest of a line already handed out cut
                self._cutting = False
                continue
            self._lineno += 1
            return self._lineno, raw.decode("utf-8", "replace")

    def _overlong(self) -> tuple[int, str]:
        raw = self._buf[self._pos : self._pos + self._max_line]
        self._pos = len(self._buf)
        was_cutting, self._cutting = self._cutting, True
        if was_cutting:
            return self.__next__()
        self._lineno += 1
        return self._lineno, raw.decode("utf-8", "replace")

    def _fill(self) -> bool:
        """Append the next chunk (dropping what was read); False at the end of the file."""
        if self._eof:
            return False
        chunk = next(self._chunks, b"")
        if not chunk:
            self._eof = True
            return False
        if self._tail_limit:
            self._keep_tail(chunk)
        self._buf = self._buf[self._pos :] + chunk
        self._pos = 0
        self._next_hit.clear()
        self._plan_end = -1
        return True

    def _keep_tail(self, chunk: bytes) -> None:
        if len(chunk) >= self._tail_limit:  # it holds the whole tail: keep its end only
            while self._tail:
                self._drop_front()
            cut = len(chunk) - self._tail_limit
            self._forget(chunk, cut)
            chunk = chunk[cut:]
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail_size - len(self._tail[0]) >= self._tail_limit:
            self._drop_front()

    def _drop_front(self) -> None:
        data = self._tail.popleft()
        self._tail_size -= len(data)
        self._forget(data)

    def _forget(self, data: bytes, end: int | None = None) -> None:
        """Count the line ends of bytes that leave the tail, `data[:end]` (they number the
        lines kept)."""
        end = len(data) if end is None else end
        if end > 0:
            self._dropped_newlines += data.count(b"\n", 0, end)
            self._dropped_ends_line = data[end - 1] == ord("\n")

    @property
    def keeps_tail(self) -> bool:
        return self._tail_limit > 0

    def tail_lines(self, select: Selector | None = None) -> list[tuple[int, str]]:
        """The numbered whole lines of the last `tail` bytes of the file (at most), read to
        its end first; only those `select` picks when it is given. Lines are cut at
        `max_line` and numbered as `__next__` numbers them."""
        while self._fill():  # what the reader did not need: only the tail is kept
            self._pos = len(self._buf)
        data = b"".join(self._tail)
        if len(data) > self._tail_limit:
            self._forget(data, len(data) - self._tail_limit)
            data = data[len(data) - self._tail_limit :]
        self._tail = deque([data])
        self._tail_size = len(data)
        lineno = self._dropped_newlines + 1  # the number of the line `data` starts in
        start = 0
        if not self._dropped_ends_line:  # it starts inside a line: from the next one on
            start = data.find(b"\n") + 1
            if start == 0:
                return []
            lineno += 1
        if select is not None and start < len(data):
            picked = self._picked(data[start:], select)
            if picked is not None:
                return [(lineno + index, text) for index, text in picked]
        lines = data[start:].split(b"\n")
        if lines and not lines[-1]:
            lines.pop()  # the file's last line end
        return [
            (lineno + index, raw[: self._max_line].decode("utf-8", "replace"))
            for index, raw in enumerate(lines)
        ]

    def _picked(self, body: bytes, select: Selector) -> list[tuple[int, str]] | None:
        """(index, line) of the lines of `body` that `select` picks; None: all of them."""
        region = body if body.endswith(b"\n") else body + b"\n"
        starts = select.select(region)
        if starts is None:
            return None
        picked = []
        index = counted = 0  # the index of the line starting at `counted`
        for at in starts:
            index += region.count(b"\n", counted, at)
            counted = at
            raw = region[at : region.index(b"\n", at)]
            picked.append((index, raw[: self._max_line].decode("utf-8", "replace")))
        return picked

    def _first_hit(self) -> int:
        """The first position at or after _pos on a line an opener finds, -1 when none in
        _buf. Each opener's hit is remembered until passed, so a buffer is searched about
        once per opener however many jumps it takes."""
        first = -1
        for opener in self._openers:
            hit = self._next_hit.get(opener)
            if hit is None or (hit != -1 and hit < self._pos):
                hit = self._search(opener)
                self._next_hit[opener] = hit
            if hit != -1 and (first == -1 or hit < first):
                first = hit
        return first

    def _search(self, opener: Opener) -> int:
        if isinstance(opener, bytes):
            return self._buf.find(opener, self._pos)
        if self._pos == 0:  # the buffer starts with a line, with no newline before it
            first_end = self._buf.find(b"\n")
            if opener.match(b"\n" + self._buf[: first_end if first_end != -1 else None]):
                return 0
        found = opener.search(self._buf, max(self._pos - 1, 0))
        return found.end() - 1 if found else -1

    def _skip(self) -> None:
        """Pass over whole lines up to the first an opener finds (or the file's end)."""
        while not self._cutting:
            hit = self._first_hit()
            if hit != -1:
                self._pass_over(self._buf.rfind(b"\n", self._pos, hit) + 1)
                return
            self._pass_over(self._buf.rfind(b"\n", self._pos) + 1)  # every complete line
            if len(self._buf) - self._pos > self._max_line or not self._fill():
                return  # an overlong or last line: __next__ hands it out as it is

    def _pass_over(self, end: int) -> None:
        """Move past the complete lines in _buf[_pos:end], keeping the last non-blank ones."""
        first = self._pos
        if end <= first:
            return
        self._count_over(end)
        kept: list[tuple[int, str]] = []
        line_end = end - 1  # the newline closing the last line passed over
        lineno = self._lineno
        while line_end > first and len(kept) < self._keep:
            start = max(self._buf.rfind(b"\n", first, line_end) + 1, first)
            raw = self._buf[start:line_end]
            if raw.strip():
                kept.append((lineno, raw[: self._max_line].decode("utf-8", "replace")))
            lineno -= 1
            line_end = start - 1
        self.passed_over.extend(reversed(kept))
        del self.passed_over[: -self._keep]

    def has_lines(self, count: int) -> bool:
        """Whether `count` lines are known to follow (the buffer, filled once if empty, holds
        that many line ends past the lines handed out), without handing any out."""
        if self._pos >= len(self._buf):
            self._fill()
        return self._buf.count(b"\n", self._pos) >= count

    def _follow_plan(self) -> None:
        """Pass over lines up to the next one `select` picked, planning the buffer's whole
        lines when they are not yet planned (filling it when it holds none)."""
        while True:
            if self._pos >= self._plan_end and not self._make_plan():
                return  # no whole line left (an overlong or last line): read as it comes
            plan = self._plan
            if plan is ALL:
                if self._pos < self._plan_end:
                    return
                continue
            while self._plan_next < len(plan) and plan[self._plan_next] < self._pos:
                self._plan_next += 1
            if self._plan_next < len(plan):
                self._count_over(plan[self._plan_next])
                return
            self._count_over(self._plan_end)

    def _make_plan(self) -> bool:
        """Ask `select` about the whole lines from _pos on; False when there are none."""
        assert self.select is not None
        while True:
            last = self._buf.rfind(b"\n", self._pos, self._pos + self.select.region_bytes)
            if last == -1:
                last = self._buf.rfind(b"\n", self._pos)
            if last != -1:
                break
            if len(self._buf) - self._pos > self._max_line or not self._fill():
                return False
        base = self._pos
        picked = self.select.select(self._buf[base : last + 1])
        self._plan = ALL if picked is None else [base + at for at in picked]
        self._plan_next = 0
        self._plan_end = last + 1
        return True

    def _count_over(self, end: int) -> None:
        """Move past the whole lines in _buf[_pos:end] without handing them out."""
        if end <= self._pos:
            return
        count = self._buf.count(b"\n", self._pos, end)
        self._lineno += count
        self.lines_passed_over += count
        self._pos = end
