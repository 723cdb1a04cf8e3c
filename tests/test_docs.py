"""Docs are generated from the code; these tests fail when they drift (run `make docs`)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

from ray_doctor.rules import RULES
from ray_doctor.rules._base import DOC_SECTIONS
from ray_doctor.rules._docs import smoke_examples


def test_generated_docs_and_readme_example_are_current():
    proc = subprocess.run(
        [sys.executable, "docs/generate.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"run `make docs`:\n{proc.stderr}"


def test_every_rule_documents_every_section_and_has_an_example():
    for rule in RULES:
        doc = rule.doc()
        assert doc.summary, rule.id
        missing = [s for s in DOC_SECTIONS if not doc.sections.get(s)]
        assert not missing, f"{rule.id} lacks {missing}"
        recorded = smoke_examples().get(rule.id) if getattr(rule, "smoke_example", None) else None
        assert (rule.example and (REPO / rule.example).exists()) or rule.example_note or recorded, (
            rule.id
        )


def test_every_rule_example_makes_the_rule_fire():
    # pylint's lesson: a doc example that is run cannot rot.
    from ray_doctor.rules._docs import example_output

    for rule in RULES:
        if rule.example is None:
            continue  # example_note says why
        output = example_output(rule)
        assert output and f"  {rule.id}  " in output, rule.id
