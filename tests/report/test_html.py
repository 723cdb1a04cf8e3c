"""--format html: one self-contained page, checked as a person would, in headless Chromium:
it shows something, its plots are drawn, the console is clean and nothing is fetched."""

from __future__ import annotations

import dataclasses
import io
import os
import pty
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import Chromium, find_chromium
from conftest import experiment_dir, run_cli
from samples import inspect_report, smoke_report, verify_report

from ray_doctor.report import build_inspect_report
from ray_doctor.report._html import HtmlFormatter
from ray_doctor.rules import run_rules
from ray_doctor.scan import scan

PLOTS_DRAWN = (
    "window.Plotly && document.readyState === 'complete' && "
    "document.querySelectorAll('.plotly-graph-div').length === "
    "document.querySelectorAll('.plotly-graph-div .main-svg').length / 3"
)


class Resources(HTMLParser):
    """Everything in a page that a browser would load by itself."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []
        self.scripts = 0
        self.csp = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if attrs.get("src") or (tag == "link" and attrs.get("href")):
            self.loaded.append(attrs.get("src") or attrs["href"])
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.csp = attrs["content"]


def resources(page: str) -> Resources:
    parser = Resources()
    parser.feed(page)
    return parser


def test_page_is_self_contained_with_all_three_plots(fixtures):
    page = HtmlFormatter().render(inspect_report(fixtures / "tune_config_correlated"))
    found = resources(page)
    assert found.loaded == [], "no script, style or image comes from elsewhere"
    assert "default-src 'none'" in found.csp and "connect-src 'none'" in found.csp
    assert found.scripts == 4  # plotly.js once, then one call per plot
    for ident in ("plot-0-metric", "plot-0-timeline", "plot-0-config-0"):
        assert f'id="{ident}"' in page
    assert "batch_size against seed, by outcome" in page
    assert "4 of 4 trials with batch_size &gt;= 512 failed" in page  # the finding, escaped


def test_no_plots_no_plotly(fixtures):
    for report in (
        smoke_report(),
        verify_report(experiment_dir(fixtures, "tune_corrupt_checkpoint")),
    ):
        page = HtmlFormatter().render(report)
        assert "plotly" not in page.lower() and resources(page).loaded == []
    assert "<code>collective</code>" in HtmlFormatter().render(smoke_report())


@pytest.fixture(scope="module")
def big_sweep(fixtures):
    """tune_retries_exhausted's two real trials, repeated as a 1,200-trial sweep."""
    result = scan(str(fixtures / "tune_retries_exhausted"), [])
    (experiment,) = result.experiments
    template = experiment.trials
    experiment.trials = [
        dataclasses.replace(trial, trial_id=f"{trial.trial_id}-{n:04d}")
        for n in range(600)
        for trial in template
    ]
    return build_inspect_report(result, run_rules(result))


def test_large_sweep_is_capped_and_says_so(big_sweep):
    page = HtmlFormatter().render(big_sweep)
    # lr=0.05 fails in all 600 copies: the correlation is real, so its scatter is there too.
    assert page.count('class="plotly-graph-div"') == 3 and 'id="plot-0-config-0"' in page
    assert (
        "25 of 1,200 trials shown: those that failed, restarted or reported NaN/Inf first." in page
    )
    assert "200 of 1,200 trials shown" in page
    assert "500 of 1,200 trials listed" in page
    # 600 trials failed the same way: one group that names them, not 600 articles.
    assert page.count("<article class='finding") < 5
    assert "600 trials" in page and "+580 more" in page
    assert len(page) < 8_000_000


def test_html_refuses_a_terminal_and_bad_output_paths(fixtures, tmp_path):
    target = str(fixtures / "tune_trial_error")
    leader, follower = pty.openpty()
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "ray_doctor", "inspect", target, "-f", "html"],
        stdout=follower,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,
    )
    os.close(follower)
    os.close(leader)
    assert proc.returncode == 2
    assert "--format html writes a file for a browser" in proc.stderr and "--output" in proc.stderr
    for output, reason in (
        (tmp_path / "no" / "such" / "dir" / "r.html", "no such directory"),
        (tmp_path, "it is a directory"),
    ):
        proc = run_cli("inspect", target, "-f", "html", "-o", str(output))
        assert proc.returncode == 2 and reason in proc.stderr and "Traceback" not in proc.stderr
    # Redirected stdout is a file: the page goes there.
    proc = run_cli("inspect", target, "-f", "html")
    assert proc.returncode == 1 and proc.stdout.startswith("<!DOCTYPE html>")


def _browser_or_skip() -> str:
    chromium = find_chromium()
    if chromium is None:
        if os.environ.get("RAY_DOCTOR_REQUIRE_BROWSER"):
            pytest.fail("Chromium is required (RAY_DOCTOR_REQUIRE_BROWSER) but not installed")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return chromium


def test_failing_experiment_report_in_a_real_browser(fixtures, tmp_path):
    from PIL import Image, ImageStat

    chromium = _browser_or_skip()
    out = tmp_path / "report.html"
    proc = run_cli(
        "inspect", str(fixtures / "tune_config_correlated"), "-f", "html", "-o", str(out)
    )
    assert proc.returncode == 1, proc.stderr
    probes = {
        "plots": "document.querySelectorAll('.plotly-graph-div').length",
        "markers": "document.querySelectorAll('.plotly-graph-div .scatterlayer .point').length",
        "lines": "document.querySelectorAll('.plotly-graph-div .scatterlayer .js-line').length",
        "titles": "[...document.querySelectorAll('.gtitle')].map(e => e.textContent)",
        "findings": "document.querySelectorAll('article.finding').length",
        "grouped": "[...document.querySelectorAll('article.finding .where')].map(e => e.textContent)",
        "trial_rows": "document.querySelectorAll('#trials tr').length - 1",
    }
    with Chromium(chromium) as browser:
        page = browser.open(out, PLOTS_DRAWN, probes)
    assert page.console_errors == []
    assert page.requests == [out.resolve().as_uri()], "the page fetches nothing"
    values = page.values
    assert values["plots"] == 3
    assert values["markers"] >= 8 and values["lines"] >= 4
    assert values["titles"] == [
        "tune_config_correlated: loss by iteration",
        "tune_config_correlated: timeline of trials",
        "tune_config_correlated: batch_size against seed, by outcome",
    ]
    # The four identical trial errors are one group (the triage view), beside the
    # config-correlated finding; every trial keeps its row in the table.
    assert values["findings"] == 2
    assert values["grouped"] == ["4 trials", "tune_config_correlated"]
    assert values["trial_rows"] == 8
    image = Image.open(io.BytesIO(page.screenshot)).convert("RGB")
    assert image.width >= 1000 and image.height >= 1500
    stats = ImageStat.Stat(image.convert("L"))
    assert stats.var[0] > 500, "not a blank page"
    colors = image.resize((320, image.height // 4)).getcolors(maxcolors=1 << 16)
    assert colors is None or len(colors) > 200, "text, plots and colours, not a flat image"
    if os.environ.get("RAY_DOCTOR_SCREENSHOT"):
        Path(os.environ["RAY_DOCTOR_SCREENSHOT"]).write_bytes(page.screenshot)
