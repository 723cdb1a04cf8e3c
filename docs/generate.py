"""Generate what docs/ and README.md show from the code, or check that they are current.

- docs/rules/<id>.md and docs/rules/README.md: from each rule's metadata and docstring, with
  an Example section made by running the rule on its bundled fixture;
- docs/report.schema.json: the schema `ray-doctor schema` prints;
- docs/formats.md: one real example of each --format (and, when writing with Chromium at
  hand, docs/formats-html.png, a screenshot of the HTML report: not checked, fonts differ);
- the example output block in README.md: what `make run` prints.

`python docs/generate.py` writes them; `--check` exits 1 listing what is stale (a test runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import formats_page  # docs/ is on sys.path when this runs as a script

REPO = Path(__file__).resolve().parents[1]
README_BLOCK = re.compile(r"(<!-- make-run-output -->\n```text\n)(.*?)(```\n)", flags=re.DOTALL)
DEMO = "fixtures/tune_trial_error"


def make_run_output() -> str:
    """`ray-doctor inspect` on the demo fixture, as `make run` shows it (no colour)."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_doctor",
            "inspect",
            DEMO,
            "--logs",
            f"{DEMO}/driver.log",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    return f"$ ray-doctor inspect {DEMO} --logs {DEMO}/driver.log\n{proc.stdout}"


def pages() -> dict[Path, str]:
    from ray_doctor.report import schema_text
    from ray_doctor.rules._docs import generate

    out = generate(REPO / "docs" / "rules")
    out[REPO / "docs" / "report.schema.json"] = schema_text()
    out[REPO / "docs" / "formats.md"] = formats_page.page()
    readme = REPO / "README.md"
    if readme.exists():
        text = readme.read_text()
        out[readme] = README_BLOCK.sub(
            lambda m: m.group(1) + make_run_output() + m.group(3), text, count=1
        )
    return out


def _neutral(text: str) -> str:
    """Recorded output without this machine in it: repo-relative paths, no temp dirs."""
    text = text.replace(f"{REPO}/", "")
    return re.sub(r"/[\w/.-]*?/ray-doctor-smoke-\w+/storage", "<smoke storage>", text)


def record_smoke_examples() -> None:
    """Run each smoke-only rule's example command for real (Ray, minutes) and record what the
    rule reports into docs/rules/smoke-examples.json; the rule pages render from it."""
    import shlex

    from ray_doctor.rules import RULES
    from ray_doctor.rules._docs import SMOKE_EXAMPLES, render_findings
    from ray_doctor.smoke._model import finding_from_json

    examples = {}
    for rule in RULES:
        command = getattr(rule, "smoke_example", None)
        if "smoke" not in rule.commands or not command:
            continue
        args = shlex.split(command)[1:]
        proc = subprocess.run(
            [sys.executable, "-m", "ray_doctor", *args, "--format", "json"],
            capture_output=True, text=True, cwd=REPO, timeout=600, check=False,
        )  # fmt: skip
        data = json.loads(proc.stdout)
        findings = [finding_from_json(f) for f in data["findings"] if f["rule"] == rule.id]
        output = render_findings(findings)
        if not output:
            raise SystemExit(f"{rule.id}: `{command}` did not report it (exit {proc.returncode})")
        examples[rule.id] = {"command": command, "output": _neutral(output)}
        print(f"recorded: {rule.id}", file=sys.stderr)
    path = REPO / SMOKE_EXAMPLES
    path.write_text(json.dumps(examples, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when anything is stale")
    parser.add_argument(
        "--smoke", action="store_true", help="first re-record the smoke rules' examples (runs Ray)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        record_smoke_examples()
    stale = []
    for path, text in pages().items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'}: {path.relative_to(REPO)}", file=sys.stderr)
    if not args.check and not formats_page.screenshot():
        print("skipped docs/formats-html.png: needs Chromium and Pillow", file=sys.stderr)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
