"""The signature prefilter (`ray_doctor._literals`) never rejects a text its regex matches."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ray_doctor._literals import may_match, needles, screen
from ray_doctor.model import Failure
from ray_doctor.rules import INSPECT_RULES
from ray_doctor.rules._signature import Signature, search
from ray_doctor.scan._logs import EVENT_PATTERNS

ROOT = Path(__file__).resolve().parents[1]


def _patterns() -> list[re.Pattern[str]]:
    """Every signature's pattern, every pattern or signature table a rule module holds, and
    the log reader's event patterns."""
    found = {sig.pattern for rule in INSPECT_RULES for sig in getattr(rule, "wordings", tuple)()}
    found |= {event.pattern for event in EVENT_PATTERNS}  # the log reader filters them too
    for name, module in list(sys.modules.items()):
        if not name.startswith("ray_doctor.rules"):
            continue
        for value in vars(module).values():
            if isinstance(value, re.Pattern):
                found.add(value)
            elif isinstance(value, tuple):
                found |= {v.pattern for v in value if isinstance(v, Signature)}
    return sorted((p for p in found if isinstance(p.pattern, str)), key=lambda p: p.pattern)


def _read(files: list[Path]) -> list[str]:
    return [
        path.read_bytes().decode("utf-8", "replace")
        for path in files
        if path.is_file() and path.stat().st_size < 2_000_000
    ]


def _fixture_logs() -> list[str]:
    """What Ray and the trials wrote in the fixtures' real runs."""
    return _read(
        [
            *sorted((ROOT / "fixtures").rglob("error.txt")),
            *sorted((ROOT / "fixtures").rglob("*.log")),
            *sorted((ROOT / "fixtures").rglob("*.err")),
        ]
    )


def _texts() -> list[str]:
    """The corpus's public excerpts and the fixtures' logs."""
    return _read(sorted((ROOT / "tests" / "corpus" / "cases").rglob("*"))) + _fixture_logs()


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        (r"foo|bar", "xx bar", True),
        (r"foo|bar", "xx baz", False),
        (r"(?i)Out of Memory", "CUDA OUT OF MEMORY", True),
        (r"(?i)Out of Memory", "nothing here", False),
        (r"(?i)kill", "\u212a" + "ILL", True),  # Kelvin sign folds to k: no case-blind filter
        (r"a(?i:B)c", "aBc", True),
        (r"x*", "", True),
        (r"(ab)+c", "abc", True),
        (r"(ab)+c", "ac", False),
        (r"^Killed$", "Killed", True),
        # Every part a match requires is looked for, not only the most selective one.
        (r"(?i)\b(?:loss|grad)s? (?:is|are) (?:nan|inf)", "the LOSS diverged", False),
        (r"(?i)\b(?:loss|grad)s? (?:is|are) (?:nan|inf)", "Grads are NaN", True),
        (r"Monitored metric \S+ = (?:nan|inf) is not finite", "metric loss = nan", False),
        # ... and nothing optional is taken for a requirement.
        (r"foobar(?:bazqux)?tail", "foobartail", True),
        (r"(?:abcdef)*xyz123", "xyz123", True),
        (r"(?:abcdef){0,2}xyz123|other", "other", True),
    ],
)
def test_cases(pattern, text, expected):
    compiled = re.compile(pattern)
    assert may_match(compiled, text) is expected
    if not expected:
        assert compiled.search(text) is None


def test_most_rule_patterns_have_needles():
    patterns = _patterns()
    with_needles = [p for p in patterns if needles(p) is not None]
    assert len(with_needles) >= 0.8 * len(patterns)


def test_no_match_is_ever_filtered_out():
    patterns = _patterns()
    checked = 0
    for text in _texts():
        failure = Failure(None, None, None, "", text=text)
        for pattern in patterns:
            lines = text.splitlines()
            if any(pattern.search(line) for line in lines):
                assert may_match(pattern, failure.joined), pattern.pattern
                checked += 1
            assert (failure.evidence_for(pattern) is None) == (
                not any(pattern.search(line) for line in lines)
            )
    assert checked > 50


def test_patterns_made_and_dropped_at_run_time_get_their_own_needles():
    """The needles are looked up by the pattern's identity: a pattern made after another was
    dropped (and may reuse its id) must not get the other's needles, past the table's size."""
    from ray_doctor._literals import MAX_PATTERNS

    for index in range(MAX_PATTERNS + 200):
        word = f"word{index}x"
        pattern = re.compile(f"{word}|{word}y")  # a new object each time, the last one dropped
        assert may_match(pattern, f"... {word} ...")
        assert not may_match(pattern, f"... word{index + 1}x ...")


def _tables() -> list[tuple[Signature, ...]]:
    """Every signature table the rules search failures with."""
    tables = {
        id(t): t
        for rule in INSPECT_RULES
        if isinstance(t := getattr(rule, "signatures", None), tuple)
    }
    for name, module in list(sys.modules.items()):
        if name.startswith("ray_doctor.rules"):
            for value in vars(module).values():
                if (
                    isinstance(value, tuple)
                    and value
                    and all(isinstance(v, Signature) for v in value)
                ):
                    tables[id(value)] = value
    return list(tables.values())


def test_a_table_screened_at_once_keeps_what_each_pattern_would():
    """`screen` (one call per table) keeps the patterns `may_match` keeps, in order, and a
    rule's search finds the same first signature and evidence as asking each in turn."""
    tables = _tables()
    assert len(tables) > 15
    texts = [*_texts(), "KILLED \u212a \u00e9 out of memory", ""]
    hits = 0
    for text in texts:
        failure = Failure(None, None, None, "", text=text)
        for table in tables:
            kept = screen(table, failure.joined, lambda sig: sig.pattern)
            assert kept == [
                i for i, sig in enumerate(table) if may_match(sig.pattern, failure.joined)
            ]
            first = next(
                ((sig, found) for sig in table if (found := failure.evidence_for(sig.pattern))),
                None,
            )
            hit = search(table, failure)
            assert (hit is None) == (first is None)
            if hit is not None:
                hits += 1
                assert (hit.signature, hit.evidence) == (first[0], first[1][0])
    assert hits > 50


def test_tables_made_and_dropped_at_run_time_get_their_own_plans():
    """Plans are kept by the table's identity, like needles: a new table that reuses a
    dropped one's id must not be screened with the old plan."""
    from ray_doctor._literals import MAX_PATTERNS

    for index in range(MAX_PATTERNS + 200):
        table = (re.compile(f"word{index}x"), re.compile("never-there"))
        assert screen(table, f"... word{index}x ...") == [0]
        assert screen(table, f"... word{index + 1}x ...") == []


def test_lines_searched_as_templates_keep_every_match():
    """With a text's lines as their templates (digits made `0`, repeats dropped), the prefilter
    still keeps every line a pattern matches: the kept log lines of a long session are searched
    that way (`rules/_signature.py`)."""
    from ray_doctor._literals import line_starts, line_templates, lines_that_may_match

    # Real logs repeat their templates (the corpus's short excerpts of many projects less so).
    logs = [line for text in _fixture_logs() for line in text.splitlines()]
    assert len(line_templates(logs).members) < len(logs) / 2
    lines = [line for text in _texts() for line in text.splitlines()][:60_000]
    joined = "\n".join(lines)
    templates = line_templates(lines)
    starts = line_starts(lines)
    checked = 0
    for pattern in _patterns():
        matching = [i for i, line in enumerate(lines) if pattern.search(line)]
        assert may_match(pattern, joined, templates) is True or not matching, pattern.pattern
        found = lines_that_may_match(pattern, joined, starts, templates=templates)
        if found is not None:
            assert set(matching) <= set(found), pattern.pattern
            assert found == sorted(set(found))
        checked += bool(matching)
    assert checked > 50


@pytest.mark.parametrize(
    ("pattern", "found"),
    [
        # A needle with digits is told from the same line with another number in it.
        (r"exit code 9\b", [3]),
        (r"exit code 1\b", [1]),
        (r"exit code 137\b", []),
        (r"(?i)\[errno 28\]|errno 28", [4]),
        (r"Agent process with name \w+ exited", [0, 1, 2, 3]),
    ],
)
def test_template_search_tells_numbers_apart(pattern, found):
    from ray_doctor._literals import line_starts, line_templates, lines_that_may_match

    lines = [
        "Agent process with name dashboard_agent exited, exit code 0.",
        "Agent process with name dashboard_agent exited, exit code 1.",
        "Agent process with name dashboard_agent exited, exit code 0.",
        "Agent process with name dashboard_agent exited, exit code 9.",
        "OSError: [Errno 28] writing shard 12",
        "OSError: [Errno 13] writing shard 14",
    ]
    compiled = re.compile(pattern)
    templates = line_templates(lines)
    assert templates.members == [[0, 1, 2, 3], [4, 5]]
    joined = "\n".join(lines)
    kept = lines_that_may_match(compiled, joined, line_starts(lines), templates=templates)
    assert [i for i in kept if compiled.search(lines[i])] == found
    assert may_match(compiled, joined, templates) is bool(found)
