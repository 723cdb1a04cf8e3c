"""The JSON report is the contract: a report saved by an earlier version must still validate,
and no field it had may disappear or be renamed without a schema_version major bump."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import experiment_dir, validate
from samples import inspect_report, smoke_report, verify_report

from ray_doctor.report import SCHEMA_VERSION

GOLDEN = Path(__file__).parent / "golden"


def key_paths(value, prefix: str = "") -> set[str]:
    """Every key path in a document; list items share one path ([]); free-form maps
    (configs, results, details) are kept as a single leaf."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}"
            paths.add(path)
            if key not in ("config", "last_result", "details", "environment", "relaunch"):
                paths |= key_paths(item, path)
    elif isinstance(value, list):
        for item in value:
            paths |= key_paths(item, prefix + "[]")
    return paths


def goldens() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("*.json"))}


def test_saved_reports_still_validate():
    found = goldens()
    assert {"inspect-1.1.json", "verify-checkpoint-1.1.json", "smoke-1.1.json"} <= set(found)
    assert "inspect-1.2.json" in found  # 1.2: every finding carries its group id
    assert all(f["group"].startswith("g-") for f in found["inspect-1.2.json"]["findings"])
    for name, report in found.items():
        validate(report)
        assert report["schema_version"].split(".")[0] == SCHEMA_VERSION.split(".")[0], name


def test_no_field_of_a_saved_report_went_missing(fixtures):
    fresh = {
        "inspect": inspect_report(fixtures / "tune_trial_error").data,
        "verify-checkpoint": verify_report(
            experiment_dir(fixtures, "tune_corrupt_checkpoint")
        ).data,
        "smoke": smoke_report().data,
    }
    for name, report in goldens().items():
        command = report["command"]
        missing = key_paths(report) - key_paths(fresh[command])
        assert not missing, f"{name}: fields gone without a major schema_version bump: {missing}"
