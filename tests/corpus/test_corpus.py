"""The real-world corpus holds its floors (tests/corpus/README.md): `make corpus` shows the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

CASES = measure.load_cases()


def test_corpus_is_large_and_varied():
    projects = {case.project for case in CASES}
    others = [case for case in CASES if case.expect == measure.OTHER]
    assert len(CASES) >= 300, len(CASES)
    assert len(projects) >= 12
    assert len(others) >= 60


def test_every_case_names_its_source_and_a_known_rule():
    from ray_doctor.rules import INSPECT_RULES

    known = {rule.id for rule in INSPECT_RULES} | {measure.OTHER}
    for case in CASES:
        assert case.source.startswith("https://"), case.name
        assert case.expect in known, (case.name, case.expect)
        assert case.expect != "trial-error", f"{case.name}: a generic error is `other`"
        assert case.text.strip(), case.name


@pytest.fixture(scope="module")
def outcomes():
    return list(measure.run(CASES))


@pytest.mark.parametrize("measure_name", sorted(measure.FLOORS))
def test_floor(outcomes, measure_name):
    totals = measure.summarise(outcomes)
    misses = [
        f"{o.case.name}: expected {o.case.expect}, headline {o.headline}"
        for o in outcomes
        if not (o.cause_found and o.headline_right)
    ]
    assert totals[measure_name] >= measure.FLOORS[measure_name], misses
