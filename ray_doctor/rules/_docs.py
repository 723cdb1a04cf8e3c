"""Rule docs: `ray-doctor explain` and docs/rules/<id>.md, both generated from the rule itself.

The Example section is made by running the rule on its bundled fixture, so the docs show real
output and a test notices when either drifts (`python docs/generate.py --check`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ray_doctor.rules._base import DOC_SECTIONS, Rule

REPO_ROOT = Path(__file__).resolve().parents[2]
# Real `ray-doctor smoke` output for the smoke-only rules, recorded by
# `python docs/generate.py --smoke` (it runs Ray); the smoke tests check it against live runs.
SMOKE_EXAMPLES = "docs/rules/smoke-examples.json"


def example_logs(example: Path) -> list[Path]:
    """The logs a fixture keeps beside its experiment: the driver's output, session logs,
    Flight Recorder dumps."""
    kept = ("driver.log", "session_logs", "fr_dumps")
    return [example / name for name in kept if (example / name).exists()]


def _verify_only(rule: type[Rule]) -> bool:
    return rule.commands == ("verify-checkpoint",)


def _smoke_only(rule: type[Rule]) -> bool:
    return rule.commands == ("smoke",)


def smoke_examples(root: Path = REPO_ROOT) -> dict[str, dict[str, str]]:
    path = root / SMOKE_EXAMPLES
    return json.loads(path.read_text()) if path.exists() else {}


def example_command(rule: type[Rule], root: Path = REPO_ROOT) -> str:
    if _smoke_only(rule):
        return getattr(rule, "smoke_example", None) or ""
    if _verify_only(rule):
        extra = "".join(f" {a}" for a in rule.example_args)
        return f"ray-doctor verify-checkpoint {rule.example}{extra}"
    logs = example_logs(root / rule.example) if rule.example else []
    extra = "".join(f" --logs {rule.example}/{p.name}" for p in logs)
    return f"ray-doctor inspect {rule.example}{extra}"


def _example_findings(rule: type[Rule], target: str) -> list:
    if _verify_only(rule):
        from ray_doctor.checkpoint import diagnose, verify_all, verify_path

        result = verify_all(target) if "--all" in rule.example_args else verify_path(target)[0]
        return [f for f in diagnose(result) if f.rule == rule.id]
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import scan

    path = Path(target)
    logs = example_logs(path) if path.is_dir() else []
    return [f for f in run_rules(scan(target, [str(p) for p in logs])) if f.rule == rule.id]


def render_findings(findings, replace: tuple[str, str] = ("", "")) -> str | None:
    """Findings as the docs show them; `replace` rewrites one path (the checkout's)."""
    old, new = replace

    def clean(text: str) -> str:
        return text.replace(old, new) if old else text

    lines: list[str] = []
    for finding in findings:
        lines.append(f"{finding.severity.value}  {finding.rule}  {clean(finding.message)}")
        for item in finding.evidence:
            location = clean(item.path)
            if item.line:
                location += f":{item.line}"
            lines.append(f"    {location}  {item.excerpt}")
        lines.append(f"  fix: {clean(finding.fix)}")
        for related in finding.related:
            lines.append(f"  also {related.rule}: {clean(related.message)}")
    return "\n".join(lines) if lines else None


def example_output(rule: type[Rule], root: Path = REPO_ROOT) -> str | None:
    """What the rule reports on its example fixture, paths relative to the repo root."""
    if _smoke_only(rule):
        return smoke_examples(root).get(rule.id, {}).get("output")
    if not rule.example or not (root / rule.example).exists():
        return None
    target = str(root / rule.example)
    # Only the checkout's location is rewritten; paths inside the data stay as written.
    return render_findings(_example_findings(rule, target), (target, rule.example))


def render_wordings(rule: type[Rule]) -> list[str]:
    """The rule's signature table: each wording it knows, who prints it, since when."""
    rows = [sig for sig in getattr(rule, "wordings", lambda: ())() if sig.emitter]
    if not rows:
        return []
    out = [
        "## Wordings",
        "",
        "Derived from the code that prints them; a new wording is one row in the rule's table.",
        "",
        "| wording | printed by | versions | example |",
        "|---|---|---|---|",
    ]
    for sig in rows:
        example = sig.example.replace("\n", " ")
        if len(example) > 160:
            example = example[:157] + "..."
        cells = [sig.label, sig.emitter, sig.versions, f"`{example}`"]
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return [*out, ""]


def render_rule_doc(rule: type[Rule], example: str | None = None) -> str:
    doc = rule.doc()
    out = [
        f"# `{rule.id}`: {rule.title}",
        "",
        doc.summary,
        "",
        f"- **id**: `{rule.id}` (stable)",
        f"- **default severity**: {rule.severity.value}",
        f"- **reported by**: {', '.join(f'`ray-doctor {c}`' for c in rule.commands)}",
        "",
    ]
    for section in DOC_SECTIONS:
        if section == "References":
            continue
        out += [f"## {section}", "", doc.sections.get(section, "").strip(), ""]
        if section == "Evidence it uses":
            out += render_wordings(rule)
    if example:
        out += [
            "## Example",
            "",
            f"`{example_command(rule)}` reports:",
            "",
            "```text",
            example,
            "```",
            "",
        ]
    if not example and rule.example_note:
        out += ["## Example", "", rule.example_note[0].upper() + rule.example_note[1:], ""]
    references = doc.sections.get("References", "").strip()
    if references:
        out += ["## References", "", references, ""]
    return "\n".join(out).rstrip() + "\n"


def generate(target: Path) -> dict[Path, str]:
    from ray_doctor.rules import RULES

    pages = {
        target / f"{rule.id}.md": render_rule_doc(rule, example_output(rule)) for rule in RULES
    }
    index = ["# Rules", "", "| id | severity | command | what it detects |", "|---|---|---|---|"]
    for rule in RULES:
        commands = ", ".join(f"`{c}`" for c in rule.commands)
        summary = rule.doc().summary
        index.append(
            f"| [`{rule.id}`]({rule.id}.md) | {rule.severity.value} | {commands} | {summary} |"
        )
    pages[target / "README.md"] = "\n".join(index) + "\n"
    return pages
