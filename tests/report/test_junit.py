"""--format junit: XML a real parser reads, with the structure CI dashboards (GitLab, Jenkins,
Azure) count: testsuites > testsuite > testcase, failure / error / skipped used for what they
mean, and counts that add up."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from conftest import experiment_dir, run_cli
from samples import inspect_report, smoke_report, verify_report

from ray_doctor.report import could_not_run_report
from ray_doctor.report._junit import JunitFormatter
from ray_doctor.rules._families import families_for

OUTCOMES = ("failure", "error", "skipped")


def parse(report, **kwargs) -> ET.Element:
    root = ET.fromstring(JunitFormatter(**kwargs).render(report))
    check_structure(root)
    return root


def check_structure(root: ET.Element) -> None:
    """What the CI readers rely on: names everywhere, one outcome at most per case, counts
    on every suite and on the root that match the cases."""
    assert root.tag == "testsuites"
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root.findall("testsuite"):
        assert suite.get("name") and suite.get("time") is not None
        cases = suite.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(c.find("failure") is not None for c in cases),
            "errors": sum(c.find("error") is not None for c in cases),
            "skipped": sum(c.find("skipped") is not None for c in cases),
        }
        for key, value in counts.items():
            assert int(suite.get(key)) == value, (suite.get("name"), key)
            totals[key] += value
        for case in cases:
            assert case.get("name") and case.get("classname")
            assert sum(case.find(tag) is not None for tag in OUTCOMES) <= 1
            for tag in ("failure", "error"):
                if case.find(tag) is not None:
                    assert case.find(tag).get("message") and case.find(tag).get("type")
    for key, value in totals.items():
        assert int(root.get(key)) == value


def suite(root: ET.Element, name: str) -> ET.Element:
    return next(s for s in root.findall("testsuite") if s.get("name") == name)


def case(element: ET.Element, name: str) -> ET.Element:
    return next(c for c in element.findall("testcase") if c.get("name") == name)


def test_inspect_one_suite_per_trial_one_case_per_rule_family(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    root = parse(report)
    names = [s.get("name") for s in root.findall("testsuite")]
    trials = [f"tune_trial_error / {t['trial_id']}" for t in report.data["trials"]]
    assert sorted(names) == sorted([*trials, "tune_trial_error (experiment)"])
    failed = suite(root, "tune_trial_error / b0523_00002")
    families = families_for("inspect")
    assert [c.get("name") for c in failed.findall("testcase")] == [*families, "files"]
    failure = case(failed, "failure").find("failure")
    assert failure.get("type") == "trial-error"
    assert "ValueError: lr=0.1 is too large" in failure.get("message")
    assert "error.txt:22" in failure.text and "fix:" in failure.text
    # The healthy trials pass every family; cross-trial rules are skipped per trial.
    healthy = suite(root, "tune_trial_error / b0523_00000")
    assert healthy.get("failures") == "0" and healthy.get("errors") == "0"
    assert case(healthy, "search-space").find("skipped") is not None
    assert root.get("failures") == "1"


def test_findings_below_fail_on_pass_and_are_listed(fixtures):
    root = parse(inspect_report(fixtures / "tune_trial_error", fail_on="never"))
    assert root.get("failures") == "0"
    out = case(suite(root, "tune_trial_error / b0523_00002"), "failure").find("system-out")
    assert "trial-error" in out.text


def test_a_cross_trial_finding_fails_in_the_experiment_suite(fixtures):
    root = parse(inspect_report(fixtures / "tune_config_correlated", fail_on="warning"))
    experiment = suite(root, "tune_config_correlated (experiment)")
    failure = case(experiment, "search-space").find("failure")
    assert failure.get("type") == "config-correlated-failures" and "batch_size" in failure.get(
        "message"
    )


def test_unreadable_file_is_an_error_not_a_failure(fixtures, tmp_path):
    target = tmp_path / "tune_recovered"
    target.mkdir()
    exp = experiment_dir(fixtures, "tune_recovered")
    import shutil

    shutil.copytree(exp, target / exp.name)
    result = next((target / exp.name).glob("*/result.json"))
    data = result.read_bytes()
    result.write_bytes(data[: len(data) - 40])  # the last row cut mid-write
    root = parse(inspect_report(target))
    errored = [
        c
        for s in root.findall("testsuite")
        for c in s.findall("testcase")
        if c.find("error") is not None
    ]
    assert [c.get("name") for c in errored] == ["files"]
    assert "cut off mid-write" in errored[0].find("error").get("message")


def test_trials_never_started_are_skipped(fixtures):
    root = parse(inspect_report(fixtures / "tune_insufficient_resources"))
    skipped = [
        s.get("name")
        for s in root.findall("testsuite")
        if case(s, "failure").find("skipped") is not None
    ]
    assert skipped, "the trial that never got resources never started"
    assert all(" / " in name for name in skipped)


def test_large_sweeps_fold_past_the_cap(fixtures):
    report = inspect_report(fixtures / "tune_config_correlated")
    root = parse(report, max_suites=3)
    suites = root.findall("testsuite")
    assert len(suites) == 4
    folded = suites[-1]
    assert folded.get("name").startswith("6 more trials")
    failure = case(folded, "failure").find("failure")
    assert failure is not None and failure.get("message").startswith("2 trials:")


def test_verify_checkpoint_suite_per_trial(fixtures):
    root = parse(verify_report(experiment_dir(fixtures, "tune_corrupt_checkpoint")))
    (only,) = root.findall("testsuite")
    assert only.get("name") == "tune_corrupt_checkpoint / f5e4a_00000"
    failure = case(only, "checkpoints").find("failure")
    assert failure.get("type") == "checkpoint-corrupt" and "checkpoint_000002" in failure.get(
        "message"
    )
    assert [c.get("name") for c in only.findall("testcase")] == [
        *families_for("verify-checkpoint"),
        "files",
    ]


def test_smoke_one_suite_one_case_per_stage():
    report = smoke_report()
    root = parse(report)
    (only,) = root.findall("testsuite")
    assert [c.get("name") for c in only.findall("testcase")] == [
        s["name"] for s in report.data["stages"]
    ]
    assert (
        case(only, "cluster").find("failure") is None
        and case(only, "cluster").find("skipped") is None
    )
    assert case(only, "device").find("skipped").get("message") == "no GPU requested"
    assert "did not start" in case(only, "collective").find("error").get("message")
    assert case(only, "port").find("failure").get("type") == "port-conflict"
    assert case(only, "checkpoint").find("failure").get("type") == "storage-unreachable"
    assert float(case(only, "collective").get("time")) == 30.0
    assert float(only.get("time")) == 42.5


def test_could_not_run_is_one_errored_case():
    root = parse(could_not_run_report("verify-checkpoint", "/nope", "no such file or directory"))
    assert root.get("errors") == "1" and root.get("tests") == "1"


def test_hostile_text_cannot_break_the_xml(fixtures):
    report = inspect_report(fixtures / "tune_trial_error")
    finding = report.data["findings"][0]
    finding["message"] = 'bad ]]> </failure> <x a="1"> & \x1b[31m\x00 end'
    finding["evidence"][0]["excerpt"] = "line with \x07 bell"
    root = parse(report)
    failure = case(suite(root, "tune_trial_error / b0523_00002"), "failure").find("failure")
    assert failure.get("message") == 'bad ]]> </failure> <x a="1"> & \ufffd[31m\ufffd end'
    assert "line with \ufffd bell" in failure.text


def test_cli_every_command_writes_junit(fixtures, tmp_path):
    out = tmp_path / "junit.xml"
    proc = run_cli("inspect", str(fixtures / "tune_trial_error"), "-f", "junit", "-o", str(out))
    assert proc.returncode == 1
    check_structure(ET.parse(out).getroot())
    proc = run_cli(
        "verify-checkpoint", "--all", str(fixtures / "tune_corrupt_checkpoint"), "-f", "junit"
    )
    assert proc.returncode == 1
    check_structure(ET.fromstring(proc.stdout))
