"""Which lines of a long log a reader must see: the rest are only counted.

A 100 MB worker log of training prints holds a few lines that matter (a traceback, a kill, an
error record) among millions that do not, and decoding, cleaning and testing each of those
in Python cost ~6 us a line: 18 s for the file (bench/README.md, twelfth pass). `Skimmer` answers for a whole buffer of raw
lines at once, in C-speed passes, which lines the log reader (`scan/_logs.py`) could do
anything with; `LineSource` hands out only those. The answer is a superset, so the reader's
result does not change:

- a line is a candidate when its bytes hold a needle of what the reader acts on (cause words,
  event patterns' literals, a traceback's opening, Tune's status lines) or something the
  text normaliser would rewrite (colour codes, entities, JSON records);
- once a candidate may open a traceback, every line after it is handed out until one that
  cannot continue it (the reader's own tests, on the line as the reader sees it);
- before a line that may open a traceback (and at a region's end, for the next region), the
  last lines the reader keeps as context (`CONTEXT_LINES` of them) are handed out too: the
  reader looks at them only when it opens one.

Most lines of a long log are the same few templates with other numbers in them, so the
needles are looked for in the buffer's distinct lines once digits are all made `0`: a
character-for-character mapping, under which a line holding a needle still holds the needle
mapped the same way.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate

from ray_doctor._literals import has_digit

DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0000000000")
CONTEXT_LINES = 4  # `_TextLogParser.context` keeps this many
DENSE = 0.5  # a region with more of its lines picked than this is handed out whole...
MAX_REST = 16  # ...and so are up to this many regions after it
# Regions start small, so little is read twice where the reader soon stops skimming (at its
# event cap) or the lines are dense, and grow while skimming pays: the passes over the needles
# cost about the same for a short region as for a long one.
FIRST_REGION = 64 * 1024
LAST_REGION = 1024 * 1024


def as_template(text: str) -> bytes:
    """A needle as it is looked for: UTF-8, digits made `0`."""
    return text.encode().translate(DIGITS_AS_ZERO)


@dataclass(frozen=True)
class Needles:
    """What makes a line a candidate: a byte string of `exact` or of `blind` (lowercase, looked
    for in the lowered line), or a match of a pattern of `exact_patterns` / `blind_patterns`.
    All as `as_template` makes them (digits as `0`)."""

    exact: tuple[bytes, ...]
    blind: tuple[bytes, ...]
    exact_patterns: tuple[re.Pattern[bytes], ...] = ()
    blind_patterns: tuple[re.Pattern[bytes], ...] = ()
    # Needles with digits, (exact, blind) as they are (not templates): every number of as many
    # digits would match their template.
    numbered: tuple[tuple[bytes, ...], tuple[bytes, ...]] = ((), ())


def needles(
    exact: list[str], blind: list[str], **patterns: tuple[re.Pattern[bytes], ...]
) -> Needles:
    """`Needles` of strings: those without digits as templates, the others kept as they are."""
    plain = [n for n in exact if not has_digit(n)]
    plain_blind = [n.lower() for n in blind if not has_digit(n)]
    return Needles(
        exact=tuple(dict.fromkeys(map(as_template, plain))),
        blind=tuple(dict.fromkeys(map(as_template, plain_blind))),
        numbered=(
            tuple(dict.fromkeys(n.encode() for n in exact if has_digit(n))),
            tuple(dict.fromkeys(n.lower().encode() for n in blind if has_digit(n))),
        ),
        **patterns,
    )


def _lines_holding(text: bytes, strings: tuple[bytes, ...], line_at: list[int]) -> Iterator[int]:
    """Indices of the lines of `text` (lines joined by newlines, starting at `line_at`) that
    hold one of `strings`."""
    last = len(line_at) - 1
    for needle in strings:
        at = text.find(needle)
        while at != -1:
            index = bisect_right(line_at, at) - 1
            yield index
            # On from the next line: the rest of this one is a candidate already.
            at = text.find(needle, line_at[index + 1]) if index + 1 < last else -1


@dataclass(frozen=True)
class ReaderView:
    """The reader's own tests, on a raw line (bytes, no newline).

    `seen(raw)`: the line as the reader sees it, None when the reader ignores it whole, or
    `MANY` when it becomes several lines (a JSON record); `opens(text)`: the message-line
    allowance after the line opens a traceback, None when it cannot open one;
    `continues(text, allowance)`: the allowance left when the line can continue an open
    traceback, None when it ends it."""

    seen: Callable[[bytes], str | None]
    opens: Callable[[str], int | None]
    continues: Callable[[str, int], int | None]
    most_allowance: int  # what a line that becomes several lines may leave open


MANY = "\x00many"  # `ReaderView.seen` of a line that becomes several lines


class Skimmer:
    """`LineSource.select` for a text log: see the module's docstring. Keeps, between calls,
    whether a traceback may be open at the end of the last region."""

    def __init__(self, needles: Needles, view: ReaderView, open_at_start: bool) -> None:
        self.needles = needles
        self.view = view
        # Whether a traceback may be open before the first line: unknown when lines were
        # handed out before skimming began, so taken as open until a line ends it.
        self.open = open_at_start
        self.allowance = view.most_allowance if open_at_start else 0
        self.rest = 0  # regions handed out whole after the last dense one
        self.resting = 0  # of them, still to come
        self.region_bytes = FIRST_REGION

    def select(self, region: bytes) -> list[int] | None:
        if self.resting:  # a dense stretch: every line, without looking
            self.resting -= 1
            self.open, self.allowance = True, self.view.most_allowance  # unknown after it
            self.region_bytes = FIRST_REGION if not self.resting else LAST_REGION
            return None
        templates = region.translate(DIGITS_AS_ZERO).split(b"\n")
        templates.pop()  # the region ends with a newline
        # Where line i starts is lengths[i] + i (its newlines): no Python step per line.
        lengths = list(accumulate(map(len, templates), initial=0))
        candidates, distinct = self._candidates(templates)
        if self.needles.numbered:
            candidates = sorted(candidates.union(self._numbered(region, distinct)))
        else:
            candidates = sorted(candidates)
        picked, openers, seen = self._follow(region, lengths, candidates, len(templates))
        if len(picked) > DENSE * len(templates):
            # Most lines are handed out, and each was read here too: skip the reading for the
            # next regions, for longer each time this stays so.
            self.rest = min(2 * self.rest or 1, MAX_REST)
            self.resting = self.rest
            self.region_bytes = LAST_REGION
        else:
            self.rest = 0
            self.region_bytes = min(2 * self.region_bytes, LAST_REGION)
        chosen = self._with_context(region, lengths, picked, openers, seen)
        return [lengths[i] + i for i in chosen]

    def _candidates(self, templates: list[bytes]) -> tuple[set[int], tuple[bytes, bytes]]:
        """Indices of the lines holding a needle without digits, found in the distinct lines;
        and the distinct lines joined, as they are and lowered."""
        distinct = list(dict.fromkeys(templates))
        joined = b"\n".join(distinct)
        lowered = joined.lower()
        line_at = [0, *accumulate(len(line) + 1 for line in distinct)]
        needles = self.needles
        hits: set[int] = set()
        for text, strings, patterns in (
            (joined, needles.exact, needles.exact_patterns),
            (lowered, needles.blind, needles.blind_patterns),
        ):
            hits.update(_lines_holding(text, strings, line_at))
            for pattern in patterns:
                hits.update(
                    bisect_right(line_at, found.start()) - 1 for found in pattern.finditer(text)
                )
        if not hits:
            return set(), (joined, lowered)
        wanted = {distinct[index] for index in hits}
        lines = {index for index, line in enumerate(templates) if line in wanted}
        return lines, (joined, lowered)

    def _numbered(self, region: bytes, distinct: tuple[bytes, bytes]) -> set[int]:
        """Indices of the lines holding a needle with digits (as templates every number would
        match it): looked for in the region itself, a pass per needle (there are few), when
        the region's distinct lines (`distinct`: joined, as they are and lowered) hold the
        needle's template at all."""
        exact, blind = self.needles.numbered
        exact = tuple(n for n in exact if n.translate(DIGITS_AS_ZERO) in distinct[0])
        blind = tuple(n for n in blind if n.translate(DIGITS_AS_ZERO) in distinct[1])
        hits: set[int] = set()
        for text, strings in ((region, exact), (region.lower() if blind else b"", blind)):
            for needle in strings:
                line = counted = 0  # the index of the line starting at `counted`
                at = text.find(needle)
                while at != -1:
                    line += text.count(b"\n", counted, at)
                    counted = text.rfind(b"\n", 0, at) + 1
                    hits.add(line)
                    at = text.find(needle, text.find(b"\n", at) + 1)  # the region ends with one
        return hits

    def _follow(
        self, region: bytes, lengths: list[int], candidates: list[int], count: int
    ) -> tuple[list[int], list[int], dict[int, str | None]]:
        """The lines to hand out (the candidates, and every line while a traceback may be
        open), those of them that may open one, and what the reader sees of each."""
        picked: list[int] = []
        openers: list[int] = []
        seen: dict[int, str | None] = {}
        at = 0
        for candidate in (*candidates, count):
            while self.open and at < candidate:
                self._pick(region, lengths, at, picked, openers, seen)
                at += 1
            if candidate == count:
                break
            self._pick(region, lengths, candidate, picked, openers, seen)
            at = candidate + 1
        return picked, openers, seen

    def _pick(
        self,
        region: bytes,
        lengths: list[int],
        index: int,
        picked: list[int],
        openers: list[int],
        seen: dict[int, str | None],
    ) -> None:
        picked.append(index)
        text = seen[index] = self._seen(region, lengths, index)
        if self._step(text):
            openers.append(index)

    def _seen(self, region: bytes, lengths: list[int], index: int) -> str | None:
        return self.view.seen(region[lengths[index] + index : lengths[index + 1] + index])

    def _step(self, text: str | None) -> bool:
        """Follow one line handed out: may a traceback be open after it? True when the line
        may open one (the reader then keeps the lines before it as its context)."""
        if text is None:
            return False  # the reader ignores the line whole
        if text == MANY:
            self.open, self.allowance = True, self.view.most_allowance
            return True
        if self.open:
            left = self.view.continues(text, self.allowance)
            if left is not None:
                self.allowance = left
                return False
        opened = self.view.opens(text)
        self.open = opened is not None
        self.allowance = opened or 0
        return self.open

    def _with_context(
        self,
        region: bytes,
        lengths: list[int],
        picked: list[int],
        openers: list[int],
        seen: dict[int, str | None],
    ) -> list[int]:
        """`picked` and the lines the reader keeps as context (the last CONTEXT_LINES it sees
        that are not blank) where it may need them: before each line that may open a
        traceback, and at the region's end (for the next region's first)."""
        chosen = set(picked)
        floor = -1
        for index in (*openers, len(lengths) - 1):
            # Back to the last such line at most: the context before it is chosen already.
            found = 0
            line = index - 1
            while line > floor and found < CONTEXT_LINES:
                text = seen[line] if line in seen else self._seen(region, lengths, line)
                if text is not None and text.strip():
                    found += 1
                    chosen.add(line)
                line -= 1
            floor = index
        return sorted(chosen)
