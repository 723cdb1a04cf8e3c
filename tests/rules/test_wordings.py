"""Every wording a rule knows is auditable and works end to end.

Each row of a rule's signature table names the code that prints it and the versions that do,
carries an example as that code prints it, matches its own example, survives the scan's
cause-word filter, and makes `inspect` on the example text name the rule."""

from __future__ import annotations

import pytest

from ray_doctor.rules import INSPECT_RULES
from ray_doctor.rules import run_rules as run
from ray_doctor.scan import scan
from ray_doctor.scan._logs import _classify
from ray_doctor.scan._normalise import clean

WORDINGS = [
    (rule, sig) for rule in INSPECT_RULES if hasattr(rule, "wordings") for sig in rule.wordings()
]


def _id(item) -> str:
    rule, sig = item
    return f"{rule.id}:{sig.label}"


def test_every_text_rule_has_a_table():
    text_rules = {rule.id for rule, _ in WORDINGS}
    for expected in ("oom-ray-memory-monitor", "oom-killed-by-os", "port-conflict", "nccl-error"):
        assert expected in text_rules


@pytest.mark.parametrize("item", WORDINGS, ids=[_id(i) for i in WORDINGS])
def test_wording_names_its_emitter_and_versions(item):
    _, sig = item
    assert sig.emitter and sig.versions and sig.example, sig.label


@pytest.mark.parametrize("item", WORDINGS, ids=[_id(i) for i in WORDINGS])
def test_wording_matches_its_own_example_and_the_scan_keeps_it(item):
    _, sig = item
    lines = [clean(line)[0] for line in sig.example.splitlines()]
    matching = [line for line in lines if sig.pattern.search(line)]
    assert matching, f"{sig.label}: pattern does not match its example"
    assert any(_classify(line) for line in matching), f"{sig.label}: the scan drops the line"


@pytest.mark.parametrize("item", WORDINGS, ids=[_id(i) for i in WORDINGS])
def test_inspect_of_the_example_names_the_rule(item, tmp_path):
    rule, sig = item
    pasted = tmp_path / "pasted.txt"
    pasted.write_text(sig.example + "\n")
    findings = run(scan(str(pasted)))
    found = {f.rule for f in findings} | {r.rule for f in findings for r in f.related}
    assert rule.id in found, (sig.label, [(f.rule, f.message[:80]) for f in findings])
