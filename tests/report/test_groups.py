"""The triage view: findings that share a rule and a cause are one group in every human
format, JSON keeps each finding with a stable group id, and a "what happened" block ranks the
causes across every experiment of a storage_path."""

from __future__ import annotations

import dataclasses
import re
import shutil

from conftest import experiment_dir, inspect_json, run_cli, validate
from samples import inspect_report

from ray_doctor.model import TrialStatus
from ray_doctor.report import build_inspect_report
from ray_doctor.report._groups import FindingGroup, finding_groups, normalised
from ray_doctor.report._html import HtmlFormatter
from ray_doctor.report._markdown import MarkdownFormatter
from ray_doctor.report._terminal import TerminalFormatter
from ray_doctor.rules import run_rules
from ray_doctor.scan import scan

FAILING = ("tune_trial_error", "tune_config_correlated", "tune_retries_exhausted")
FOUR_CAUSES = (*FAILING, "tune_corrupt_checkpoint")


def _storage(fixtures, tmp_path, scenarios: tuple[str, ...]):
    """A storage_path holding the real experiments of `scenarios` side by side."""
    storage = tmp_path / "ray_results"
    for scenario in scenarios:
        shutil.copytree(experiment_dir(fixtures, scenario), storage / scenario)
    return storage


def _groups_by_rule(report: dict) -> dict[str, list[set[str]]]:
    """rule -> the sets of trial ids that share a group id."""
    by_group: dict[str, set[str]] = {}
    rules: dict[str, str] = {}
    for finding in report["findings"]:
        by_group.setdefault(finding["group"], set()).add(finding["trial_id"])
        rules[finding["group"]] = finding["rule"]
    out: dict[str, list[set[str]]] = {}
    for group, trials in by_group.items():
        out.setdefault(rules[group], []).append(trials)
    return out


def test_identical_and_near_identical_failures_share_a_group(fixtures):
    # Four real trials raised the same RuntimeError with batch sizes 512 and 1024 in the
    # message: one cause, one group; JSON still has the four findings.
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_config_correlated")))
    assert code == 1
    trial_errors = [f for f in report["findings"] if f["rule"] == "trial-error"]
    assert len(trial_errors) == 4
    assert len({f["group"] for f in trial_errors}) == 1
    assert "[-1, 512, 4]" in trial_errors[0]["message"]
    assert any("[-1, 1024, 4]" in f["message"] for f in trial_errors)


def test_what_varies_between_trials_is_masked_and_the_rest_is_not():
    a = normalised(
        "Trial 2b265_00002 failed with RuntimeError: shape '[-1, 512, 4]' (raised in "
        "train_model at /home/ray/job/train.py:539), actor d58a00b7737f6128786d1c6b01000000",
        "2b265_00002",
    )
    b = normalised(
        "Trial 2b265_00007 failed with RuntimeError: shape '[-1, 1024, 4]' (raised in "
        "train_model at /home/other/job/train.py:540), actor 0ab1c2d3e4f5a6b7c8d9e0f1a2b3c4d5",
        "2b265_00007",
    )
    assert a == b
    different = normalised("Trial x failed with ValueError: shape '[-1, 512, 4]'", "x")
    assert different != a


def test_a_group_cause_is_the_shared_sentence_and_a_path_keeps_its_case():
    def cause(message: str, trial_id: str | None) -> str:
        finding = {"message": message, "trial_id": trial_id, "experiment": "exp"}
        return FindingGroup("g", [finding, dict(finding)]).cause

    assert cause("Trial 2b265_00002 failed with ValueError: x", "2b265_00002") == (
        "Failed with ValueError: x"
    )
    assert cause("tune_healthy/tuner.pkl: pickle #1 references ...", None) == (
        "tune_healthy/tuner.pkl: pickle #1 references ..."
    )
    assert cause("checkpoint_000001 of 2b265_00002 is empty", "2b265_00002") == (
        "checkpoint_000001 of <trial> is empty"
    )


def test_json_group_ids_are_stable_and_tell_causes_apart(fixtures, tmp_path):
    storage = _storage(fixtures, tmp_path, FAILING)
    _, first = inspect_json(str(storage))
    _, second = inspect_json(str(storage))
    assert [f["group"] for f in first["findings"]] == [f["group"] for f in second["findings"]]
    assert all(re.fullmatch(r"g-[0-9a-f]{12}", f["group"]) for f in first["findings"])
    groups = _groups_by_rule(first)
    # The ValueError of tune_trial_error and the RuntimeError of tune_config_correlated are
    # both trial-error findings, with different causes: two groups.
    assert sorted(len(trials) for trials in groups["trial-error"]) == [1, 4]
    validate(first)


def test_storage_path_with_several_failing_experiments(fixtures, tmp_path):
    # tune_config_correlated twice (the same cause in two experiments) and tune_trial_error.
    storage = _storage(fixtures, tmp_path, ("tune_config_correlated", "tune_trial_error"))
    shutil.copytree(storage / "tune_config_correlated", storage / "tune_config_correlated_2")
    proc = run_cli("inspect", str(storage))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    start = lines.index("What happened")
    causes = lines[start + 1 : lines.index("Findings", start) - 1]
    # Ranked by trials affected, across experiments: 8 trials of two experiments first.
    assert re.match(
        r"\s+8 trials\s+trial-error \(2 experiments\)\s+Failed with RuntimeError", causes[0]
    )
    assert any(re.match(r"\s+1 trial\s+trial-error\s+Failed with ValueError", c) for c in causes)
    heads = [line for line in lines if line.startswith("✖ error  trial-error")]
    assert len(heads) == 2  # both causes, one heading each
    assert "trial-error x 8 trials" in heads[0]
    members = lines[lines.index(heads[0]) + 1]
    assert "tune_config_correlated / 2b265_" in members
    _, report = inspect_json(str(storage))
    shared = {f["experiment"] for f in report["findings"] if f["group"] == _lead_group(report)}
    assert shared == {"tune_config_correlated", "tune_config_correlated_2"}


def _lead_group(report: dict) -> str:
    """The group id of the RuntimeError trial-error findings."""
    return next(
        f["group"]
        for f in report["findings"]
        if f["rule"] == "trial-error" and "RuntimeError" in f["message"]
    )


def _mixed_sweep(fixtures, trials: int = 1000, every: int = 10):
    """A `trials`-trial sweep in memory, one in `every` errored: the real errored trials of
    four fixtures (four causes) in turns, the rest tune_healthy's real trials."""
    results = {s: scan(str(experiment_dir(fixtures, s))) for s in (*FOUR_CAUSES, "tune_healthy")}
    healthy_result = results["tune_healthy"]
    (experiment,) = healthy_result.experiments
    healthy = list(experiment.trials)
    errored = [
        trial
        for scenario in FOUR_CAUSES
        for trial in results[scenario].experiments[0].trials
        if trial.status == TrialStatus.ERROR
    ]
    by_cause = {}
    for trial in errored:
        by_cause.setdefault(trial.path.split("/ray_results/")[1].split("/")[0], trial)
    causes = list(by_cause.values())
    experiment.trials = [
        dataclasses.replace(
            causes[(i // every) % len(causes)] if i % every == every - 1 else healthy[i % 3],
            trial_id=f"9f735_{i:05d}",
        )
        for i in range(trials)
    ]
    return build_inspect_report(healthy_result, run_rules(healthy_result))


def test_a_failing_sweep_reads_in_one_screen_and_names_every_cause(fixtures):
    report = _mixed_sweep(fixtures)
    assert report.data["summary"]["trials_by_status"]["ERROR"] == 100
    text = TerminalFormatter(width=100).render(report)
    lines = text.splitlines()
    assert len(lines) <= 60, text
    groups = finding_groups(report.data)
    assert len(groups) >= 4
    for group in groups:
        assert f"  {group.lead['rule']}" in text
        assert group.cause[:40] in text  # every distinct cause is named
    assert "trial-error x 25 trials" in text
    assert "+20 more" in text


def test_a_finding_that_differs_stands_out(fixtures):
    report = _mixed_sweep(fixtures, trials=200)
    # One more trial that failed its own way: its own group, shown whole.
    odd = dict(report.data["findings"][0])
    odd.update(trial_id="9f735_99999", message="Trial 9f735_99999 failed with KeyError: 'lr'")
    odd["group"] = "g-000000000000"
    report.data["findings"].append(odd)
    text = TerminalFormatter(width=100).render(report)
    assert "Trial 9f735_99999 failed with KeyError: 'lr'" in text
    assert re.search(rf"1 trial\s+{odd['rule']}\s+Failed with KeyError: 'lr'", text)


def test_every_human_format_shows_groups(fixtures):
    report = inspect_report(fixtures / "tune_config_correlated")
    markdown = MarkdownFormatter().render(report)
    assert "**What happened**" in markdown
    assert "- **4 trials**: `trial-error`: Failed with RuntimeError" in markdown
    assert "Trials: 2b265_00002, 2b265_00003, 2b265_00006, 2b265_00007" in markdown
    assert markdown.count("<details><summary>✖ <code>trial-error</code>") == 1
    page = HtmlFormatter().render(report)
    assert "<h3>What happened</h3>" in page
    assert page.count("<article class='finding error'") == 1
    assert "<b>Trials:</b> 2b265_00002, 2b265_00003, 2b265_00006, 2b265_00007" in page
