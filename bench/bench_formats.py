"""Benchmark: what each --format costs, on the biggest fixture and on 10,000-trial sweeps.

- the import cost of plotly (the HTML format's plotting library), cold and warm;
- `ray-doctor inspect DIR -q -f FORMAT -o FILE` on fixtures/tune_config_correlated and on a
  10,000-trial sweep built the way bench_inspect.py builds one (wall, peak RSS, output size);
- rendering alone, in-process, for a failing 10,000-trial sweep: tune_retries_exhausted's two
  real trials repeated 5,000 times (5,000 failed trials, so SARIF grouping, JUnit folding and
  the plot caps all come into play).

Run: `python bench/bench_formats.py` (figures of the last run go in bench/formats.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from _measure import measure  # noqa: E402
from bench_inspect import build  # noqa: E402

FORMATS = ("json", "html", "sarif", "junit", "markdown", "github")


def import_cost(module: str, runs: int = 5) -> float:
    """Best wall seconds of `import module` over the interpreter's own start-up."""
    python = sys.executable
    base = min(measure([python, "-c", "pass"])[0] for _ in range(runs))
    with_module = min(measure([python, "-c", f"import {module}"])[0] for _ in range(runs))
    return with_module - base


def cli_table(target: Path, out: Path) -> None:
    print(f"\n`ray-doctor inspect {target.name} -q -f FORMAT -o FILE`:\n")
    print("| format | wall | peak RSS | output |")
    print("|---|---|---|---|")
    for name in FORMATS:
        path = out / f"report.{name}"
        command = [
            sys.executable,
            "-m",
            "ray_doctor",
            "inspect",
            str(target),
            "-q",
            "-f",
            name,
            "-o",
            str(path),
        ]
        wall, rss = min(measure(command) for _ in range(2))
        print(f"| {name} | {wall:.2f} s | {rss:.0f} MB | {path.stat().st_size / 1e6:.2f} MB |")


def failing_sweep(copies: int):
    from ray_doctor.report import build_inspect_report
    from ray_doctor.rules import run_rules
    from ray_doctor.scan import scan

    result = scan(str(REPO / "fixtures" / "tune_retries_exhausted"), [])
    (experiment,) = result.experiments
    template = experiment.trials
    experiment.trials = [
        dataclasses.replace(t, trial_id=f"{t.trial_id}-{n:05d}")
        for n in range(copies)
        for t in template
    ]
    return build_inspect_report(result, run_rules(result))


def render_table(copies: int) -> None:
    from ray_doctor.report import FormatOptions, make_formatter

    report = failing_sweep(copies)
    print(
        f"\nRendering only, {len(report.data['trials']):,} trials ({len(report.findings):,} findings):\n"
    )
    print("| format | render | output | what was capped |")
    print("|---|---|---|---|")
    for name in FORMATS:
        formatter = make_formatter(name, FormatOptions(workspace=str(REPO)))
        start = time.perf_counter()
        text = formatter.render(report)
        seconds = time.perf_counter() - start
        print(
            f"| {name} | {seconds:.2f} s | {len(text.encode()) / 1e6:.2f} MB | {_capped(name, text)} |"
        )


def _capped(name: str, text: str) -> str:
    import json
    import re

    if name == "sarif":
        run = json.loads(text)["runs"][0]
        return f"{len(run['results'])} results"
    if name == "junit":
        return f"{text.count('<testsuite ')} testsuites"
    if name == "html":
        plots = text.count('class="plotly-graph-div"')
        return f"{plots} plots; " + "; ".join(
            re.findall(r"<p class='note'>([^<]*trials[^<]*)</p>", text)[:3]
        )
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "ray_doctor")], check=True)
    print(
        f"import plotly.io + plotly.offline: {import_cost('plotly.io, plotly.offline') * 1000:.0f} ms"
    )
    print(f"import ray_doctor.report._html: {import_cost('ray_doctor.report._html') * 1000:.0f} ms")
    out = args.workdir / "formats"
    out.mkdir(parents=True, exist_ok=True)
    cli_table(REPO / "fixtures" / "tune_config_correlated", out)
    sweep = build(args.workdir / "formats" / "sweep", args.trials, args.iterations)
    cli_table(sweep, out)
    render_table(args.trials // 2)


if __name__ == "__main__":
    main()
