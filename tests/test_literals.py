"""The signature prefilter (`ray_doctor._literals`) never rejects a text its regex matches."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ray_doctor._literals import may_match, needles
from ray_doctor.model import Failure
from ray_doctor.rules import INSPECT_RULES
from ray_doctor.rules._signature import Signature
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


def _texts() -> list[str]:
    files = [
        *sorted((ROOT / "tests" / "corpus" / "cases").rglob("*")),
        *sorted((ROOT / "fixtures").rglob("error.txt")),
        *sorted((ROOT / "fixtures").rglob("*.log")),
        *sorted((ROOT / "fixtures").rglob("*.err")),
    ]
    texts = []
    for path in files:
        if path.is_file() and path.stat().st_size < 2_000_000:
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return texts


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
                assert may_match(pattern, failure._joined), pattern.pattern
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
