"""Literal strings a regex cannot match without: a `str.find` prefilter for signature searches.

A failing sweep asks every failure about every signature of every rule (125 patterns per
failure, 5,000 failures at 10,000 trials x 50 % errored): most patterns are absent, and
proving that with `re.search` over a whole traceback costs ~15-20 us each, where looking
for a literal the pattern requires costs well under one. `needles(pattern)` reads the
pattern's parse tree once and returns strings one of which every match contains; a text
holding none of them cannot match, so skipping the search changes no result. Anything the
walk does not understand gives no needles (the search then runs as before).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

try:  # Python 3.11+
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

_LITERAL = _c.LITERAL
_SUBPATTERN = _c.SUBPATTERN
_BRANCH = _c.BRANCH
_REPEATS = tuple(
    getattr(_c, name)
    for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
    if hasattr(_c, name)
)
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)

Needles = tuple[str, ...]
T = TypeVar("T")
DIGITS_AS_ZERO = str.maketrans("0123456789", "0000000000")


def _best(candidates: list[Needles]) -> Needles | None:
    """The candidate whose shortest needle is longest (the most selective), fewer needles first."""
    if not candidates:
        return None
    return max(candidates, key=lambda c: (min(len(n) for n in c), -len(c)))


def _walk(items: Any) -> Needles | None:
    """Needles of a parsed sequence: the most selective of what it requires (`_walk_all`)."""
    return _best(_walk_all(items))


def _walk_all(items: Any) -> list[Needles]:
    """What a parsed sequence requires, each a set of needles one of which a match holds:
    runs of literal characters, and what groups, repeats of at least one and alternations
    (every branch with needles) require."""
    candidates: list[Needles] = []
    run: list[str] = []

    def close() -> None:
        if run:
            candidates.append(("".join(run),))
            run.clear()

    for op, av in items:
        if op is _LITERAL:
            run.append(chr(av))
            continue
        close()
        if op is _SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if not add_flags and not del_flags:  # a scoped flag (?i:...) changes the case rule
                found = _walk(sub)
                if found:
                    candidates.append(found)
        elif op in _REPEATS:
            low, _high, sub = av
            if low >= 1:
                found = _walk(sub)
                if found:
                    candidates.append(found)
        elif op is _BRANCH:
            branches = [_walk(branch) for branch in av[1]]
            if branches and all(branches):
                candidates.append(tuple(dict.fromkeys(n for b in branches for n in b)))  # type: ignore[union-attr]
        elif _ATOMIC is not None and op is _ATOMIC:
            found = _walk(av)
            if found:
                candidates.append(found)
        # Anything else (classes, anchors, look-arounds, backreferences) ends the run and
        # requires nothing we can name.
    close()
    return candidates


def needles(pattern: re.Pattern[str]) -> tuple[Needles, bool] | None:
    """(strings one of which every match of `pattern` contains, whether to look for them
    case-blind), or None when there are none to be sure of: the first of `requirements`."""
    found = requirements(pattern)
    return (found[0][0], found[1]) if found else None


# Sets of needles tested per pattern, at most: each after the first only screens out more
# texts that hold the first (a pattern's common word, e.g. "loss" of "loss is nan").
MAX_SETS = 3
MIN_EXTRA_NEEDLE = 3  # a shorter needle is in nearly every text: its set is not worth a test


def requirements(pattern: re.Pattern[str]) -> tuple[tuple[Needles, ...], bool] | None:
    """(sets of strings, every match of `pattern` holding one string of each set; whether to
    look for them case-blind), the most selective set first; None when there is none to be
    sure of. Callers go through `_requirements_of`, which keeps each pattern's answer."""
    if not isinstance(pattern.pattern, str):
        return None
    try:
        parsed = _p.parse(pattern.pattern, pattern.flags)
        found = [c for c in _walk_all(parsed) if c and all(c)]
        flags = parsed.state.flags
    except Exception:  # a prefilter never stands in the way of the search
        return None
    blind = bool(flags & re.IGNORECASE)
    if blind:
        # Case-blind needles are looked for in the lowered text, which is exact for ASCII
        # only (Unicode case folding has pairs like "k" / KELVIN SIGN).
        found = [
            tuple(dict.fromkeys(n.lower() for n in c)) for c in found if all(map(str.isascii, c))
        ]
    best = _best(found)
    if best is None:
        return None
    extra = [c for c in found if c is not best and min(map(len, c)) >= MIN_EXTRA_NEEDLE]
    extra.sort(key=lambda c: (min(len(n) for n in c), -len(c)), reverse=True)
    return (best, *extra[: MAX_SETS - 1]), blind


# The last long text lowered: the rules ask one joined text (a session's kept log lines, MBs)
# about each case-blind pattern in turn.
_LOWERED: list[str] = ["", ""]
LONG_TEXT = 4096


def _lowered(text: str) -> str:
    if len(text) < LONG_TEXT:
        return text.lower()
    if _LOWERED[0] is not text:
        _LOWERED[:] = [text, text.lower()]
    return _LOWERED[1]


# `requirements` by the pattern's identity: a compiled pattern hashes its whole program on every
# lookup (~0.3 us, as long as the `in` tests themselves), and a failing sweep asks 600,000 times.
# The pattern is kept with its entry, so its id cannot be reused while the entry stands.
Requirements = tuple[tuple[Needles, ...], bool]
_BY_PATTERN: dict[int, tuple[re.Pattern[str], Requirements | None]] = {}
MAX_PATTERNS = 4096


def _requirements_of(pattern: re.Pattern[str]) -> Requirements | None:
    entry = _BY_PATTERN.get(id(pattern))
    if entry is not None:  # (an entry holds its pattern: no other object can have its id)
        return entry[1]
    if len(_BY_PATTERN) >= MAX_PATTERNS:
        _BY_PATTERN.clear()
    found = requirements(pattern)
    _BY_PATTERN[id(pattern)] = (pattern, found)
    return found


def may_match(pattern: re.Pattern[str], text: str, templates: LineTemplates | None = None) -> bool:
    """False only when `pattern` cannot match anywhere in `text`. `templates`: `text`'s lines
    as `line_templates` makes them, when the caller has them: needles without digits are
    looked for there instead."""
    found = _requirements_of(pattern)
    if found is None:
        return True
    sets, blind = found
    if blind and not text.isascii():  # O(1): CPython knows a string's widest character
        return True
    if templates is not None:
        split = _split(sets)
        if not any(numbered for _, numbered in split):
            text = ""  # (not lowered: nothing is looked for in it)
        elif blind:
            text = _lowered(text)
        return _holds_all_split(split, templates.seen(blind), text)
    return _holds_all(sets, _lowered(text) if blind else text)


def _holds_all(sets: tuple[Needles, ...], text: str) -> bool:
    """Whether `text` holds a needle of every set. Loops, not any(): 600,000 calls on a
    failing sweep."""
    for strings in sets:
        for needle in strings:
            if needle in text:
                break
        else:
            return False
    return True


# A table's screening plan by the table's identity (kept with it, as `_BY_PATTERN` is).
_PLANS: dict[int, tuple[Sequence[Any], list[Requirements | None]]] = {}


def screen(
    table: Sequence[T], text: str, pattern_of: Callable[[T], re.Pattern[str]] | None = None
) -> list[int]:
    """Indices of the items of `table` (patterns, or what `pattern_of` takes a pattern from)
    that may match in `text`, ascending: `may_match` for a whole table in one call. A failing
    sweep asks each failure about each rule's table (5,000 failures x 125 patterns at 10,000
    trials x 50 % errored), and a call into `may_match` per pattern cost more than its `in`
    tests. The table must not change while it is in use (its plan is kept by identity)."""
    entry = _PLANS.get(id(table))
    if entry is None:  # (an entry holds its table: no other object can have its id meanwhile)
        if len(_PLANS) >= MAX_PATTERNS:
            _PLANS.clear()
        patterns = [pattern_of(item) for item in table] if pattern_of else table
        entry = (table, [_requirements_of(p) for p in patterns])  # type: ignore[arg-type]
        _PLANS[id(table)] = entry
    kept: list[int] = []
    lowered: str | None = None
    for index, found in enumerate(entry[1]):
        if found is None:
            kept.append(index)
            continue
        sets, blind = found
        hay = text
        if blind:
            if not text.isascii():
                kept.append(index)
                continue
            if lowered is None:
                lowered = _lowered(text)
            hay = lowered
        # `_holds_all`, inlined: a call per pattern cost as much as its `in` tests.
        for strings in sets:
            for needle in strings:
                if needle in hay:
                    break
            else:
                break  # no needle of this set: the pattern cannot match
        else:
            kept.append(index)
    return kept


def line_starts(lines: list[str]) -> list[int]:
    """Where each of `lines` starts in `"\n".join(lines)`."""
    starts = []
    at = 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    return starts


def lines_that_may_match(
    pattern: re.Pattern[str],
    joined: str,
    starts: list[int],
    lowered: str | None = None,
    templates: LineTemplates | None = None,
) -> list[int] | None:
    """Indices of the lines of `joined` (lines joined by newlines, each starting at
    `starts[i]`) that may hold a match, ascending; None when the pattern has no needles to
    look for (every line may). One `str.find` sweep per needle over the whole text instead of
    a test per line and pattern. `lowered`: `joined.lower()`, when the caller has it;
    `templates`: the lines as `line_templates` makes them (swept instead, when the pattern's
    needles hold no digit)."""
    found = _requirements_of(pattern)
    if found is None:
        return None
    sets, blind = found
    if blind:
        if not joined.isascii():
            return None
        text = _lowered(joined) if lowered is None else lowered
    else:
        text = joined
    if templates is not None:
        return _templated_lines(_split(sets), templates, blind, text, starts)
    if not _holds_all(sets[1:], text):
        return []
    hits: set[int] = set()
    for needle in sets[0]:
        hits.update(lines_holding(needle, text, starts))
    return sorted(hits)


def _templated_lines(
    split: Split, templates: LineTemplates, blind: bool, text: str, starts: list[int]
) -> list[int]:
    """`lines_that_may_match` with the needles without digits looked for in the templates."""
    seen = templates.seen(blind)
    if not _holds_all_split(split[1:], seen, text):
        return []
    plain, numbered = split[0]
    hits: set[int] = set()
    members = templates.members
    for needle in plain:
        for slot in lines_holding(needle, seen, templates.starts):
            hits.update(members[slot])
    for needle, template in numbered:
        if template in seen:
            hits.update(lines_holding(needle, text, starts))
    return sorted(hits)


@dataclass
class LineTemplates:
    """Lines with their digits made `0`, each distinct one once (joined by newlines, `starts`
    where each starts), and which of the original lines each stands for. The map is character
    for character, so a line holds a needle without digits exactly when its template does: a
    log's kept lines (tens of thousands of checkpoint, kill or state-dump lines a long session
    repeats with other numbers) are searched as their few templates."""

    joined: str
    starts: list[int]
    members: list[list[int]]
    _lowered: str | None = None

    def seen(self, blind: bool) -> str:
        """The joined templates as a case-blind or exact search sees them."""
        if not blind:
            return self.joined
        if self._lowered is None:
            self._lowered = self.joined.lower()
        return self._lowered


def line_templates(lines: list[str]) -> LineTemplates:
    """`lines` as their distinct templates, with the lines each stands for."""
    members: dict[str, list[int]] = {}
    for index, template in enumerate("\n".join(lines).translate(DIGITS_AS_ZERO).split("\n")):
        members.setdefault(template, []).append(index)
    distinct = list(members)
    if sum(map(len, members.values())) != len(lines):  # a line held a newline
        distinct = [line.translate(DIGITS_AS_ZERO) for line in lines]
        return LineTemplates(
            "\n".join(distinct), line_starts(distinct), [[i] for i in range(len(lines))]
        )
    return LineTemplates("\n".join(distinct), line_starts(distinct), list(members.values()))


# Each set of needles as (those without digits, those with): a template tells a needle with
# digits from any other number of as many digits, so those are looked for in the text itself.
Split = tuple[tuple[Needles, tuple[tuple[str, str], ...]], ...]  # numbered: (needle, template)
_SPLITS: dict[int, tuple[tuple[Needles, ...], Split]] = {}


def _split(sets: tuple[Needles, ...]) -> Split:
    entry = _SPLITS.get(id(sets))
    if entry is None:  # (an entry holds its sets: no other object can have their id)
        if len(_SPLITS) >= MAX_PATTERNS:
            _SPLITS.clear()
        split = tuple(
            (
                tuple(n for n in strings if not has_digit(n)),
                tuple((n, n.translate(DIGITS_AS_ZERO)) for n in strings if has_digit(n)),
            )
            for strings in sets
        )
        entry = _SPLITS[id(sets)] = (sets, split)
    return entry[1]


def has_digit(text: str) -> bool:
    return any(char in "0123456789" for char in text)


def _holds_all_split(split: Split, templates: str, text: str) -> bool:
    """`_holds_all`, each set's needles without digits looked for in `templates` (the text's
    lines as `line_templates` makes them), those with digits in `text`."""
    for plain, numbered in split:
        for needle in plain:
            if needle in templates:
                break
        else:
            for needle, template in numbered:
                # A line holding the needle holds its template: most are settled there.
                if template in templates and needle in text:
                    break
            else:
                return False
    return True


def lines_holding(needle: str, joined: str, starts: list[int]) -> Iterator[int]:
    """Indices of the lines of `joined` (see `lines_that_may_match`) holding `needle`."""
    at = joined.find(needle)
    while at != -1:
        index = bisect_right(starts, at) - 1
        yield index
        # On to the next line: the rest of this one is already a candidate.
        at = joined.find(needle, starts[index + 1]) if index + 1 < len(starts) else -1
