"""Rule docs: `ray-doctor explain` and docs/rules/<id>.md, both generated from the rule itself.

The Example section is made by running the rule on its bundled fixture, so the docs show real
output and a test notices when either drifts (`python docs/generate.py --check`).
"""

from __future__ import annotations

from pathlib import Path

from ray_doctor.rules._base import DOC_SECTIONS, Rule

REPO_ROOT = Path(__file__).resolve().parents[2]


def example_output(rule: type[Rule], root: Path = REPO_ROOT) -> str | None:
    """What the rule reports on its example fixture, paths relative to the repo root."""
    if not rule.example or not (root / rule.example).exists():
        return None
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import scan

    target = str(root / rule.example)
    result = scan(target)
    findings = run_rules(result, [rule])
    lines: list[str] = []
    for finding in findings:
        lines.append(f"{finding.severity.value}  {finding.rule}  {finding.message}")
        for item in finding.evidence:
            # Only the checkout's location is rewritten; paths inside the data stay as written.
            location = item.path.replace(target, rule.example, 1)
            if item.line:
                location += f":{item.line}"
            lines.append(f"    {location}  {item.excerpt}")
        lines.append(f"  fix: {finding.fix}")
    return "\n".join(lines) if lines else None


def render_rule_doc(rule: type[Rule], example: str | None = None) -> str:
    doc = rule.doc()
    out = [
        f"# `{rule.id}`: {rule.title}",
        "",
        doc.summary,
        "",
        f"- **id**: `{rule.id}` (stable)",
        f"- **default severity**: {rule.severity.value}",
        "",
    ]
    for section in DOC_SECTIONS:
        if section == "References":
            continue
        out += [f"## {section}", "", doc.sections.get(section, "").strip(), ""]
    if example:
        out += [
            "## Example",
            "",
            f"`ray-doctor inspect {rule.example}` reports:",
            "",
            "```text",
            example,
            "```",
            "",
        ]
    references = doc.sections.get("References", "").strip()
    if references:
        out += ["## References", "", references, ""]
    return "\n".join(out).rstrip() + "\n"


def generate(target: Path) -> dict[Path, str]:
    from ray_doctor.rules import RULES

    pages = {
        target / f"{rule.id}.md": render_rule_doc(rule, example_output(rule)) for rule in RULES
    }
    index = ["# Rules", "", "| id | severity | what it detects |", "|---|---|---|"]
    for rule in RULES:
        index.append(
            f"| [`{rule.id}`]({rule.id}.md) | {rule.severity.value} | {rule.doc().summary} |"
        )
    pages[target / "README.md"] = "\n".join(index) + "\n"
    return pages
