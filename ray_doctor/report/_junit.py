"""JUnit XML, the test report GitLab, Jenkins, Azure and most CI dashboards read.

- inspect: one <testsuite> per trial (and one per experiment, for what no trial owns), one
  <testcase> per rule family plus `files` (could every file be read);
- verify-checkpoint: one <testsuite> per trial whose checkpoints were checked;
- smoke: one <testsuite> for the run, one <testcase> per stage.

<failure> is a finding at or above --fail-on; a finding below it passes, listed in
<system-out>; <error> is something that could not be evaluated (an unreadable file, a smoke
stage that crashed); <skipped> is a check that does not apply (a trial that never started or
reported no results, a stage that was not run). Built with ElementTree, never by pasting
strings, so whatever a log says cannot break the XML.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ray_doctor.report._common import SEVERITY_RANK, evidence_base, location, short_path
from ray_doctor.report._interface import Formatter
from ray_doctor.report._report import Report

# Characters XML 1.0 forbids even escaped (control codes a log may carry).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
Key = tuple[str | None, str | None]  # (experiment, trial id or checkpoint path)
TARGET: Key = (None, None)  # what belongs to no experiment or trial
MAX_SUITES = 1_000  # trial suites one by one; the rest are folded into one suite
MAX_LISTED = 20


def clean(text: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(text))


@dataclass
class Case:
    name: str
    classname: str
    time: float = 0.0
    failure: tuple[str, str, str] | None = None  # (message, type, details)
    error: tuple[str, str, str] | None = None
    skipped: str | None = None
    output: list[str] = field(default_factory=list)  # system-out lines


@dataclass
class Suite:
    name: str
    cases: list[Case] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    time: float = 0.0


class JunitFormatter(Formatter):
    name = "junit"

    def __init__(self, max_suites: int = MAX_SUITES) -> None:
        self.max_suites = max_suites

    def render(self, report: Report) -> str:
        data = report.data
        if data["summary"]["exit_code"] == 2 and not data.get("stages"):
            suites = [_could_not_run(data)]
        elif data["command"] == "smoke":
            suites = [_smoke_suite(data)]
        else:
            suites = _TrialSuites(data, self.max_suites).build()
        return _xml(data, suites)


def _xml(data: dict[str, Any], suites: list[Suite]) -> str:
    root = ET.Element("testsuites", name=f"ray-doctor {data['command']}")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in suites:
        counts = {
            "tests": len(suite.cases),
            "failures": sum(c.failure is not None for c in suite.cases),
            "errors": sum(c.error is not None for c in suite.cases),
            "skipped": sum(c.skipped is not None for c in suite.cases),
        }
        for key, value in counts.items():
            totals[key] += value
        element = ET.SubElement(
            root,
            "testsuite",
            name=clean(suite.name),
            **{k: str(v) for k, v in counts.items()},
            time=f"{suite.time:.3f}",
            timestamp=(data.get("generated_at") or "").removesuffix("Z"),
        )
        if suite.properties:
            properties = ET.SubElement(element, "properties")
            for name, value in suite.properties.items():
                ET.SubElement(properties, "property", name=name, value=clean(value))
        for case in suite.cases:
            _case(element, case)
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{sum(s.time for s in suites):.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _case(parent: ET.Element, case: Case) -> None:
    element = ET.SubElement(
        parent,
        "testcase",
        name=clean(case.name),
        classname=clean(case.classname),
        time=f"{case.time:.3f}",
    )
    for tag, outcome in (("failure", case.failure), ("error", case.error)):
        if outcome:
            message, kind, details = outcome
            child = ET.SubElement(element, tag, message=clean(message), type=clean(kind))
            child.text = clean(details)
    if case.skipped is not None:
        ET.SubElement(element, "skipped", message=clean(case.skipped))
    if case.output:
        ET.SubElement(element, "system-out").text = clean("\n".join(case.output))


def _finding_text(finding: dict[str, Any], base: str | None) -> str:
    lines = [f"[{finding['severity']}] {finding['rule']}: {finding['message']}"]
    lines += [
        f"  {location(e, base)}  {e.get('excerpt') or ''}".rstrip() for e in finding["evidence"]
    ]
    lines.append(f"  fix: {finding['fix']}")
    return "\n".join(lines)


def _judge(
    case: Case, findings: list[dict[str, Any]], fail_on: str | None, base: str | None
) -> None:
    """A failure for findings at or above --fail-on; the others are listed in system-out."""
    threshold = SEVERITY_RANK.get(fail_on or "", 99)
    failing = [f for f in findings if SEVERITY_RANK[f["severity"]] >= threshold]
    if failing:
        first = failing[0]
        message = (
            first["message"]
            if len(failing) == 1
            else (f"{len(failing)} findings: " + "; ".join(f["rule"] for f in failing))
        )
        details = "\n\n".join(_finding_text(f, base) for f in failing)
        case.failure = (message, first["rule"], details)
    case.output += [_finding_text(f, base) for f in findings if f not in failing]


class _TrialSuites:
    """inspect and verify-checkpoint: a suite per trial, a case per rule family."""

    def __init__(self, data: dict[str, Any], max_suites: int) -> None:
        from ray_doctor.rules._families import families_for

        self.data = data
        self.max_suites = max_suites
        self.families = families_for(data["command"])
        self.fail_on = data["summary"].get("fail_on")
        self.base = evidence_base(data)

    def build(self) -> list[Suite]:
        units = self._units()
        findings: dict[Key, list[dict[str, Any]]] = defaultdict(list)
        for finding in self.data["findings"]:
            findings[self._owner(finding, units)].append(finding)
        errors: dict[Key, list[dict[str, Any]]] = defaultdict(list)
        for error in self.data["errors"]:
            errors[self._owner_of_path(error["path"], units)].append(error)
        if TARGET in findings or TARGET in errors or not units:
            units[TARGET] = {"path": self.data["target"]["path"], "kind": "target"}
        # Trials with something to say first, so a capped report keeps them.
        order = sorted(units, key=lambda key: not (findings.get(key) or errors.get(key)))
        kept, folded = order[: self.max_suites], order[self.max_suites :]
        suites = [self._suite(key, units[key], findings[key], errors[key]) for key in kept]
        if folded:
            suites.append(self._folded_suite(folded, findings, errors))
        return suites

    def _units(self) -> dict[Key, dict[str, Any]]:
        """(experiment, trial_id) -> what the suite is about; (experiment, None) for the
        experiment itself. verify-checkpoint's trials come from its checkpoints."""
        units: dict[Key, dict[str, Any]] = {}
        for experiment in self.data.get("experiments", []):
            units[(experiment["name"], None)] = {"path": experiment["path"], "kind": "experiment"}
        for trial in self.data.get("trials", []):
            units[(trial["experiment"], trial["trial_id"])] = {**trial, "kind": "trial"}
        for checkpoint in self.data.get("checkpoints", []):
            key = (checkpoint.get("experiment"), checkpoint.get("trial_id") or checkpoint["path"])
            # A trial's checkpoints live in its dir: the suite names that dir.
            where = (
                checkpoint["path"].rstrip("/").rsplit("/", 1)[0] if key[0] else checkpoint["path"]
            )
            unit = units.setdefault(key, {"path": where, "kind": "checkpoints", "roots": []})
            unit["roots"].append(checkpoint["path"])
        return units

    def _owner(self, finding: dict[str, Any], units: dict[Key, dict[str, Any]]) -> Key:
        key = (finding.get("experiment"), finding.get("trial_id"))
        if key in units:
            return key
        if finding["evidence"]:
            owner = self._owner_of_path(finding["evidence"][0]["path"], units)
            if owner != TARGET:
                return owner
        return (key[0], None) if (key[0], None) in units else TARGET

    def _owner_of_path(self, path: str, units: dict[Key, dict[str, Any]]) -> Key:
        """The unit whose dir holds `path` (the deepest one), else the target."""
        best, depth = TARGET, -1
        for key, unit in units.items():
            for root in unit.get("roots") or [unit.get("path")]:
                inside = root and (path == root or path.startswith(root.rstrip("/") + "/"))
                if inside and len(root) > depth:
                    best, depth = key, len(root)
        return best

    def _suite(self, key, unit: dict[str, Any], findings, errors) -> Suite:
        experiment, trial = key
        kind = unit["kind"]
        label = short_path(unit.get("path"), self.base) or self.data["target"]["path"]
        if kind == "trial":
            name = f"{experiment} / {trial}"
        elif kind == "checkpoints":
            name = f"{experiment} / {trial}" if experiment else f"checkpoint {label}"
        else:
            name = f"{experiment or label} (experiment)" if kind == "experiment" else label
        own_trial = trial if kind == "trial" or (kind == "checkpoints" and experiment) else None
        classname = ".".join(x for x in ("ray-doctor", experiment, own_trial) if x)
        by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
        from ray_doctor.rules._families import family_of

        for finding in findings:
            by_family[family_of(finding["rule"])].append(finding)
        suite = Suite(name, properties={"path": unit.get("path") or ""})
        if kind == "trial":
            suite.properties["status"] = unit["status"]
        for family in self.families + sorted(set(by_family) - set(self.families)):
            case = Case(family, classname)
            skip = self._not_applicable(family, unit)
            if skip and not by_family.get(family):
                case.skipped = skip
            else:
                _judge(case, by_family.get(family, []), self.fail_on, self.base)
            suite.cases.append(case)
        suite.cases.append(self._files_case(classname, errors))
        return suite

    def _not_applicable(self, family: str, unit: dict[str, Any]) -> str | None:
        from ray_doctor.rules._families import ACROSS_TRIALS, NEED_RESULTS

        if unit["kind"] != "trial":
            return None
        if family in ACROSS_TRIALS:
            return "compares trials with each other: see the experiment's suite"
        if not unit.get("path"):
            return "the trial never started (no trial dir)"
        if family in NEED_RESULTS and not unit.get("rows") and unit.get("iterations") is None:
            return "the trial reported no results"
        return None

    def _files_case(self, classname: str, errors: list[dict[str, Any]]) -> Case:
        case = Case("files", classname)
        if errors:
            first = errors[0]
            message = f"could not read {short_path(first['path'], self.base)}: {first['reason']}"
            if len(errors) > 1:
                message += f" (and {len(errors) - 1} more)"
            details = "\n".join(
                f"{short_path(e['path'], self.base)}: {e['reason']}" for e in errors
            )
            case.error = (message, "unreadable", details)
        return case

    def _folded_suite(self, keys: list[Key], findings, errors) -> Suite:
        """Trials past the cap, in one suite: a case per family that fails if any of them does."""
        suite = Suite(
            f"{len(keys):,} more trials (past the first {self.max_suites:,}; --format json lists each)",
            properties={"trials": str(len(keys))},
        )
        from ray_doctor.rules._families import family_of

        by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for key in keys:
            for finding in findings.get(key, []):
                by_family[family_of(finding["rule"])].append(finding)
        for family in self.families:
            case = Case(family, "ray-doctor.folded")
            _judge(case, by_family.get(family, []), self.fail_on, self.base)
            if case.failure:
                trials = sorted({f.get("trial_id") or "" for f in by_family[family]} - {""})
                listed = ", ".join(trials[:MAX_LISTED]) + (
                    ", …" if len(trials) > MAX_LISTED else ""
                )
                case.failure = (f"{len(trials):,} trials: {listed}", *case.failure[1:])
            suite.cases.append(case)
        suite.cases.append(
            self._files_case("ray-doctor.folded", [e for k in keys for e in errors.get(k, [])])
        )
        return suite


def _smoke_suite(data: dict[str, Any]) -> Suite:
    suite = Suite(
        f"smoke {data['target']['path']}",
        properties={"ray_version": data["target"].get("ray_version") or ""},
        time=data["summary"].get("duration_s") or 0.0,
    )
    fail_on = data["summary"].get("fail_on")
    for stage in data["stages"]:
        case = Case(stage["name"], "ray-doctor.smoke", time=stage.get("duration_s") or 0.0)
        status = stage["status"]
        own = _stage_findings(data, stage)
        # A stage's findings carry its evidence; a stage without findings shows its own.
        lines = [_finding_text(f, None) for f in own] or [
            f"  {location(e)}  {e.get('excerpt') or ''}".rstrip() for e in stage["evidence"]
        ]
        details = "\n".join([stage["title"], stage["message"], *lines])
        if status == "fail":
            case.failure = (
                stage["message"] or stage["title"],
                (own[0]["rule"] if own else "fail"),
                details,
            )
        elif status == "error":
            case.error = (stage["message"] or "could not be evaluated", "error", details)
        elif status == "skip":
            case.skipped = stage["message"] or "not run"
        else:
            case.output.append(stage["message"] or stage["title"])
            _judge(case, own, fail_on, None)
        suite.cases.append(case)
    for where, why in ((e["path"], e["reason"]) for e in data["errors"]):
        case = Case("run", "ray-doctor.smoke")
        case.error = (f"{where}: {why}", "could-not-run", f"{where}: {why}")
        suite.cases.append(case)
    return suite


def _stage_findings(data: dict[str, Any], stage: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings a stage produced: findings[] lists them stage by stage, in stage order,
    and each stage names its findings' rules in `rules`."""
    start = 0
    for other in data["stages"]:
        if other is stage:
            own = data["findings"][start : start + len(stage["rules"])]
            return [f for f, rule in zip(own, stage["rules"], strict=False) if f["rule"] == rule]
        start += len(other["rules"])
    return []


def _could_not_run(data: dict[str, Any]) -> Suite:
    """Exit 2: one suite with one errored case, so CI shows the run did not happen."""
    suite = Suite(f"{data['command']} {data['target']['path']}")
    case = Case("run", f"ray-doctor.{data['command']}")
    reasons = [f"{e['path']}: {e['reason']}" for e in data["errors"]] or ["could not run"]
    case.error = (reasons[0], "could-not-run", "\n".join(reasons))
    suite.cases.append(case)
    return suite
