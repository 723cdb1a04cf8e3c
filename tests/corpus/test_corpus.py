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
        if not o.passed
    ]
    assert totals[measure_name] >= measure.FLOORS[measure_name], misses


def test_no_case_outside_the_known_misses_fails(outcomes):
    known = measure.load_known_misses()
    regressed = [
        f"{o.case.name}: expected {o.case.expect}, headline {o.headline}, found {list(o.found)}"
        for o in outcomes
        if not o.passed and o.case.name not in known
    ]
    assert not regressed, regressed


def test_known_misses_still_miss_and_exist(outcomes):
    known = measure.load_known_misses()
    names = {o.case.name for o in outcomes}
    assert not set(known) - names, "known_misses.txt names cases the corpus lacks"
    fixed = [o.case.name for o in outcomes if o.passed and o.case.name in known]
    assert not fixed, f"take these off tests/corpus/known_misses.txt: {fixed}"
    assert all(known.values()), "every known miss says why"
