"""SARIF 2.1.0, as GitHub code scanning reads it.

- `tool.driver.rules` is the rule registry (ids are the stable contract);
- one result per finding, anchored at its evidence: a file inside the workspace (the CI
  checkout) as a path relative to it, any other local file as a file:// URI, and evidence that
  is not a local file (a storage URI, a node, stdin) as a relative pseudo-path, because code
  scanning refuses every URI scheme but file;
- `partialFingerprints` from rule + experiment + trial + evidence file, so re-running on the same
  experiment updates alerts instead of duplicating them;
- GitHub's limits: a rule that fires on many trials of one experiment gets its first results
  one by one and the rest as one grouped result; at most 25,000 results a run and 100 related
  locations a result; what was grouped or cut is said in the run's notifications.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from typing import Any
from urllib.parse import quote

from ray_doctor import __version__
from ray_doctor.report._common import (
    SEVERITY_RANK,
    anchor,
    below,
    docs_link,
    local_path,
    plural,
    project_url,
)
from ray_doctor.report._interface import FormatOptions, Formatter
from ray_doctor.report._report import Report

SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SRCROOT = "%SRCROOT%"
FINGERPRINT = "rayDoctorFinding/v1"
MAX_RESULTS = 25_000  # GitHub: results per run
MAX_PER_GROUP = 50  # results of one rule in one experiment before the rest are grouped
MAX_RELATED = 100  # GitHub shows 100 locations of a result
MAX_NOTIFICATIONS = 100
MAX_LISTED_TRIALS = 20  # trial ids named in a grouped result's message


class SarifFormatter(Formatter):
    name = "sarif"

    def __init__(
        self,
        workspace: str | None = None,
        indent: bool = False,
        max_results: int = MAX_RESULTS,
        max_per_group: int = MAX_PER_GROUP,
    ) -> None:
        self.workspace = workspace
        self.indent = indent
        self.max_results = max_results
        self.max_per_group = max_per_group

    @classmethod
    def from_options(cls, options: FormatOptions) -> SarifFormatter:
        return cls(workspace=options.workspace, indent=options.indent)

    def render(self, report: Report) -> str:
        return (
            json.dumps(self.log(report), indent=2 if self.indent else None, ensure_ascii=False)
            + "\n"
        )

    def log(self, report: Report) -> dict[str, Any]:
        data = report.data
        rules = _rule_descriptors(data["findings"])
        index = {rule["id"]: i for i, rule in enumerate(rules)}
        results, notes = self._results(data, index)
        run: dict[str, Any] = {
            "tool": {"driver": _driver(rules)},
            "invocations": [_invocation(data, notes)],
            "results": results,
            "properties": {"command": data["command"], "target": data["target"]["path"]},
        }
        if self.workspace:
            root = "file://" + quote(self.workspace.rstrip("/") + "/")
            run["originalUriBaseIds"] = {SRCROOT: {"uri": root}}
        return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}

    def _results(
        self, data: dict[str, Any], index: dict[str, int]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        groups: dict[tuple[str, str | None], list[dict[str, Any]]] = defaultdict(list)
        for finding in data["findings"]:
            groups[(finding["rule"], finding.get("experiment"))].append(finding)
        results: list[dict[str, Any]] = []
        notes: list[str] = []
        seen: Counter[str] = Counter()
        for (rule, experiment), findings in groups.items():
            for finding in findings[: self.max_per_group]:
                results.append(self._result(data, finding, index, seen))
            rest = findings[self.max_per_group :]
            if rest:
                results.append(self._grouped(data, rule, experiment, rest, index))
                notes.append(
                    f"{rule} in {experiment or 'the run'}: the first {self.max_per_group} findings "
                    f"are single results, the other {len(rest):,} one grouped result"
                )
        results.sort(key=lambda r: -SEVERITY_RANK[_severity_of(r["level"])])
        if len(results) > self.max_results:
            left_out = len(results) - self.max_results
            results = results[: self.max_results]
            notes.append(
                f"{plural(left_out, 'result')} left out: GitHub reads at most "
                f"{self.max_results:,} results a run (the JSON report has them all)"
            )
        return results, notes

    def _result(
        self,
        data: dict[str, Any],
        finding: dict[str, Any],
        index: dict[str, int],
        seen: Counter[str],
    ) -> dict[str, Any]:
        evidence = finding["evidence"]
        primary = anchor(data, evidence, self.workspace)
        locations = [self._location(primary)] if primary else [self._no_location(data)]
        related = [self._location(e, i) for i, e in enumerate(evidence) if e is not primary]
        key = _fingerprint(data, finding)
        seen[key] += 1
        if seen[key] > 1:  # two findings alike in rule, trial and file: keep both alerts
            key = f"{key}:{seen[key]}"
        result: dict[str, Any] = {
            "ruleId": finding["rule"],
            "ruleIndex": index[finding["rule"]],
            "level": LEVEL[finding["severity"]],
            "message": {"text": f"{finding['message']}\nFix: {finding['fix']}"},
            "locations": locations,
            "partialFingerprints": {FINGERPRINT: key},
            "properties": _finding_properties(finding),
        }
        if related:
            result["relatedLocations"] = related[:MAX_RELATED]
        return result

    def _grouped(
        self,
        data: dict[str, Any],
        rule: str,
        experiment: str | None,
        findings: list[dict[str, Any]],
        index: dict[str, int],
    ) -> dict[str, Any]:
        """The repeats of one rule in one experiment, as one result: GitHub shows the top
        5,000 results only, and thousands of identical alerts help nobody."""
        trials = [f["trial_id"] for f in findings if f.get("trial_id")]
        listed = ", ".join(trials[:MAX_LISTED_TRIALS]) + (
            ", …" if len(trials) > MAX_LISTED_TRIALS else ""
        )
        first = findings[0]
        severity = max((f["severity"] for f in findings), key=SEVERITY_RANK.__getitem__)
        text = (
            f"{len(findings):,} more findings of {rule} ({first['title']}) in "
            f"{experiment or 'the run'}"
            + (f", trials {listed}" if trials else "")
            + f". The first of them: {first['message']}\nFix: {first['fix']}"
        )
        firsts = [f["evidence"][0] for f in findings if f["evidence"]]
        primary = anchor(data, first["evidence"], self.workspace)
        digest = _digest(f"{rule}\0{experiment or ''}\0grouped")
        return {
            "ruleId": rule,
            "ruleIndex": index[rule],
            "level": LEVEL[severity],
            "message": {"text": text},
            "locations": [self._location(primary)] if primary else [self._no_location(data)],
            "relatedLocations": [
                self._location(e, i) for i, e in enumerate(firsts[1 : MAX_RELATED + 1])
            ],
            "partialFingerprints": {FINGERPRINT: digest},
            "properties": {
                "experiment": experiment,
                "grouped": len(findings),
                "trials": trials[:1000],
            },
        }

    def _location(self, evidence: dict[str, Any], ident: int | None = None) -> dict[str, Any]:
        physical: dict[str, Any] = {"artifactLocation": self._artifact(evidence["path"])}
        if evidence.get("line"):
            physical["region"] = {"startLine": evidence["line"]}
        location: dict[str, Any] = {"physicalLocation": physical}
        if ident is not None:
            location["id"] = ident
        if evidence.get("excerpt"):
            location["message"] = {"text": evidence["excerpt"]}
        if local_path(evidence["path"]) is None:
            location["logicalLocations"] = [
                {"fullyQualifiedName": evidence["path"], "kind": "resource"}
            ]
        return location

    def _no_location(self, data: dict[str, Any]) -> dict[str, Any]:
        """A finding without evidence is anchored at what the command looked at."""
        return self._location({"path": data["target"]["path"], "line": None, "excerpt": ""})

    def _artifact(self, path: str) -> dict[str, Any]:
        local = local_path(path)
        if local is None:
            # Not a local file: code scanning refuses other URI schemes, so a relative
            # pseudo-path names it (stable across runs); the description keeps it exact.
            pseudo = path.replace("://", "/", 1).lstrip("/") or "ray-doctor"
            return {"uri": quote(pseudo), "description": {"text": path}}
        relative = below(local, self.workspace)
        if relative is not None:
            return {"uri": quote(relative), "uriBaseId": SRCROOT}
        return {"uri": "file://" + quote(local)}


def _severity_of(level: str) -> str:
    return {"error": "error", "warning": "warning", "note": "info"}[level]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _fingerprint(data: dict[str, Any], finding: dict[str, Any]) -> str:
    """rule + experiment + trial + evidence file, the file relative to the target so that the
    same experiment read from another mount (or another CI runner) keeps its alerts."""
    evidence = finding["evidence"]
    file = evidence[0]["path"] if evidence else ""
    file = below(file, data["target"]["path"]) or file
    parts = (finding["rule"], finding.get("experiment") or "", finding.get("trial_id") or "", file)
    return _digest("\0".join(parts))


def _finding_properties(finding: dict[str, Any]) -> dict[str, Any]:
    properties = {
        "experiment": finding.get("experiment"),
        "trial_id": finding.get("trial_id"),
        "title": finding["title"],
    }
    if finding.get("related"):
        properties["related_rules"] = [r["rule"] for r in finding["related"]]
    return properties


def _driver(rules: list[dict[str, Any]]) -> dict[str, Any]:
    driver: dict[str, Any] = {
        "name": "ray-doctor",
        "version": __version__,
        "semanticVersion": __version__,
        "rules": rules,
    }
    home = project_url("Repository")
    if home:
        driver["informationUri"] = home
    return driver


def _rule_descriptors(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rule in the registry, then any id a finding carries that the registry lacks."""
    from ray_doctor.rules import RULES
    from ray_doctor.rules._docs import render_rule_doc
    from ray_doctor.rules._families import family_of

    descriptors = []
    for rule in RULES:
        doc = rule.doc()
        descriptor: dict[str, Any] = {
            "id": rule.id,
            "name": rule.__name__,
            "shortDescription": {"text": rule.title},
            "fullDescription": {"text": doc.summary},
            "help": {
                "text": f"{doc.summary}\n\nFix: {doc.sections.get('Fix', '')}",
                "markdown": render_rule_doc(rule),
            },
            "defaultConfiguration": {"level": LEVEL[rule.severity.value]},
            "properties": {"tags": ["ray", family_of(rule.id), *rule.commands]},
        }
        link = docs_link(rule.docs_url())
        if "://" in link:
            descriptor["helpUri"] = link
        descriptors.append(descriptor)
    known = {d["id"] for d in descriptors}
    for finding in findings:
        if finding["rule"] not in known:
            known.add(finding["rule"])
            descriptors.append(
                {
                    "id": finding["rule"],
                    "shortDescription": {"text": finding["title"]},
                    "defaultConfiguration": {"level": LEVEL[finding["severity"]]},
                }
            )
    return descriptors


def _invocation(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Did the run complete, and what could not be read or was left out."""
    code = data["summary"]["exit_code"]
    notifications = [{"level": "note", "message": {"text": note}} for note in notes]
    for stage in data.get("stages", []):
        if stage["status"] == "error":
            text = f"smoke stage {stage['name']} could not be evaluated: {stage['message']}"
            notifications.append({"level": "error", "message": {"text": text}})
    errors = data["errors"]
    level = "error" if code == 2 else "warning"
    for error in errors[:MAX_NOTIFICATIONS]:
        notifications.append(
            {"level": level, "message": {"text": f"{error['path']}: {error['reason']}"}}
        )
    if len(errors) > MAX_NOTIFICATIONS:
        text = (
            f"{len(errors) - MAX_NOTIFICATIONS:,} more paths could not be read (see --format json)"
        )
        notifications.append({"level": "warning", "message": {"text": text}})
    invocation: dict[str, Any] = {"executionSuccessful": code != 2, "exitCode": code}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return invocation
