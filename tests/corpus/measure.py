"""Run `ray-doctor inspect` on every real excerpt in tests/corpus/cases and score it.

`python tests/corpus/measure.py` (or `make corpus`) prints, per expected rule and overall:
cause found (the expected rule among the findings, headline or folded under it), headline
right (the expected rule leads), and for `other` cases whether no specific cause claimed them.
`--failures` lists each miss with its source; `--json` prints the per-case outcome.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CASES = Path(__file__).resolve().parent / "cases"
HEADER_KEYS = ("source", "project", "versions", "expect", "note")
OTHER = "other"
# A headline of these ids claims no cause: the error is reported as unknown, with its text.
UNCLAIMED = {None, "trial-error"}
# The goals are 98 %, 95 % and 100 %. `other` stays below 100 % on purpose, not by tuning: a few
# texts are a Ray message that names several causes itself (the generic "worker died" notice,
# the Train V2 worker-group timeout) whose thread found the less common one, which the excerpt
# does not show, and some are the cause's own words where the thread found what produced them
# (a driver bug behind a watchdog timeout, a library regression behind a device mismatch);
# tests/corpus/README.md lists them. The floors sit under what is measured, which the per-case
# test below guards exactly. Each time a floor moved, tests/corpus/README.md says why (new
# unseen texts with their misses, or a new rule taking texts out of `other`).
FLOORS = {"cause_found": 0.89, "headline_right": 0.89, "other_unclaimed": 0.89}
# Every case outside this list must pass: a floor alone would let a new case's win hide an old
# case's regression.
KNOWN_MISSES_FILE = Path(__file__).resolve().parent / "known_misses.txt"


def load_known_misses(path: Path = KNOWN_MISSES_FILE) -> dict[str, str]:
    """Case name -> why it stays missed, from `name  # reason` lines."""
    misses = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, _, reason = line.partition("#")
        if name.strip():
            misses[name.strip()] = reason.strip()
    return misses


@dataclass(frozen=True)
class Case:
    path: Path
    source: str
    project: str
    versions: str
    expect: str
    note: str
    text: str

    @property
    def name(self) -> str:
        """Relative to the corpus; a case not yet in it (a new batch measured before it is
        added) by its own path."""
        path = self.path.resolve()
        return str(path.relative_to(CASES)) if path.is_relative_to(CASES) else str(self.path)


@dataclass(frozen=True)
class Outcome:
    case: Case
    headline: str | None
    found: tuple[str, ...]  # every rule id in the report, folded ones included

    @property
    def cause_found(self) -> bool:
        if self.case.expect == OTHER:
            return self.headline in UNCLAIMED
        return self.case.expect in self.found

    @property
    def headline_right(self) -> bool:
        if self.case.expect == OTHER:
            return self.headline in UNCLAIMED
        return self.headline == self.case.expect

    @property
    def passed(self) -> bool:
        return self.cause_found and self.headline_right


def parse_case(path: Path) -> Case:
    raw = path.read_text(encoding="utf-8")
    head, sep, body = raw.partition("\n---\n")
    if not sep:
        raise ValueError(f"{path}: no '---' line between header and excerpt")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() in HEADER_KEYS:
            fields[key.strip()] = value.strip()
    missing = [k for k in HEADER_KEYS if not fields.get(k)]
    if missing:
        raise ValueError(f"{path}: header lacks {', '.join(missing)}")
    return Case(path=path, text=body, **fields)


def load_cases(root: Path = CASES) -> list[Case]:
    return [parse_case(p) for p in sorted(root.rglob("*.txt"))]


def diagnose(case: Case, workdir: Path) -> Outcome:
    """What `ray-doctor inspect FILE` reports for the excerpt saved as a file."""
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import scan

    target = workdir / case.path.name
    target.write_bytes(case.text.encode("utf-8"))
    findings = run_rules(scan(str(target)))
    found = tuple(
        rule for f in findings for rule in (f.rule, *(related.rule for related in f.related))
    )
    return Outcome(case, findings[0].rule if findings else None, found)


def run(cases: list[Case]) -> Iterator[Outcome]:
    with tempfile.TemporaryDirectory(prefix="ray-doctor-corpus-") as tmp:
        for case in cases:
            yield diagnose(case, Path(tmp))


@dataclass
class Score:
    total: int = 0
    found: int = 0
    headline: int = 0

    def add(self, outcome: Outcome) -> None:
        self.total += 1
        self.found += outcome.cause_found
        self.headline += outcome.headline_right


def summarise(outcomes: list[Outcome]) -> dict[str, float]:
    specific = [o for o in outcomes if o.case.expect != OTHER]
    others = [o for o in outcomes if o.case.expect == OTHER]
    return {
        "cases": len(outcomes),
        "cause_found": sum(o.cause_found for o in specific) / max(len(specific), 1),
        "headline_right": sum(o.headline_right for o in specific) / max(len(specific), 1),
        "other_unclaimed": sum(o.cause_found for o in others) / max(len(others), 1),
    }


def report(outcomes: list[Outcome], show_failures: bool) -> str:
    per_rule: dict[str, Score] = defaultdict(Score)
    for outcome in outcomes:
        per_rule[outcome.case.expect].add(outcome)
    lines = [f"{'expected':<26} {'cases':>5} {'cause found':>12} {'headline':>9}"]
    for rule in sorted(per_rule):
        score = per_rule[rule]
        lines.append(f"{rule:<26} {score.total:>5} {score.found:>12} {score.headline:>9}")
    if show_failures:
        lines.append("")
        for o in outcomes:
            if not (o.cause_found and o.headline_right):
                lines.append(
                    f"MISS {o.case.name}: expected {o.case.expect}, headline {o.headline}, "
                    f"found {sorted(set(o.found))}  <{o.case.source}>"
                )
    totals = summarise(outcomes)
    projects = len({o.case.project for o in outcomes})
    lines.append("")
    lines.append(
        f"{totals['cases']} cases from {projects} projects: "
        f"cause found {totals['cause_found']:.1%}, headline right {totals['headline_right']:.1%}, "
        f"other left unclaimed {totals['other_unclaimed']:.1%}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", action="store_true", help="list every miss")
    parser.add_argument("--json", action="store_true", help="per-case outcomes as JSON lines")
    parser.add_argument("paths", nargs="*", help="case files (default: every case)")
    args = parser.parse_args(argv)
    cases = [parse_case(Path(p)) for p in args.paths] if args.paths else load_cases()
    outcomes = list(run(cases))
    if args.json:
        for o in outcomes:
            print(
                json.dumps(
                    {
                        "case": o.case.name,
                        "expect": o.case.expect,
                        "headline": o.headline,
                        "found": sorted(set(o.found)),
                    }
                )
            )
        return 0
    print(report(outcomes, args.failures))
    totals = summarise(outcomes)
    below = [k for k, floor in FLOORS.items() if totals[k] < floor]
    if below:
        print(f"below the floor: {', '.join(below)} (floors: {FLOORS})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
