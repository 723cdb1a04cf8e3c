"""One self-contained HTML page: summary, findings with evidence and fixes, plots, trials.

Nothing is fetched when it is opened: styles are inline, plotly.js (from the plotly wheel) is
inlined once, and a Content-Security-Policy forbids every network request. Plots come from
`_plots` (capped for large sweeps); plotly is imported only here, only for this format.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

from ray_doctor.report._common import (
    SEVERITY_MARK,
    STAGE_MARK,
    STATUS_ORDER,
    checkpoint_status,
    counts_line,
    docs_link,
    evidence_base,
    location,
    plural,
    short_path,
    subject_line,
    verdict,
    where,
)
from ray_doctor.report._groups import (
    FindingGroup,
    finding_groups,
    message,
    ranked_causes,
    wants_summary,
)
from ray_doctor.report._interface import FormatOptions, Formatter, FormatUnavailable
from ray_doctor.report._report import Report

MAX_FINDINGS = 500
MAX_TRIAL_ROWS = 500
MAX_ERRORS = 200
# No network: inline scripts and styles, data: images (plotly's own icons), nothing else.
CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'"
)
STYLE = """
:root { --error:#c62828; --warning:#b26a00; --info:#1565c0; --ok:#2e7d32; --muted:#5f6368; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #1f2328; background: #fafbfc; }
header { background: #24292f; color: #fff; padding: 20px 32px; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header .target { color: #d0d7de; font-family: ui-monospace, monospace; font-size: 13px; }
main { padding: 8px 32px 40px; max-width: 1400px; }
nav { margin: 12px 0; } nav a { margin-right: 16px; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 12px; font-weight: 600;
           margin-left: 8px; font-size: 14px; }
.v0 { background: var(--ok); } .v1 { background: var(--error); } .v2, .v3 { background: #6e7781; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 16px 0; }
.card { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 10px 16px;
        min-width: 120px; }
.card b { display: block; font-size: 24px; }
.card.error b { color: var(--error); } .card.warning b { color: var(--warning); }
.card.info b { color: var(--info); }
section { margin-top: 28px; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
article.finding { background: #fff; border: 1px solid #d0d7de; border-left: 6px solid;
                  border-radius: 6px; padding: 10px 16px; margin: 12px 0; }
article.error { border-left-color: var(--error); } article.warning { border-left-color: var(--warning); }
article.info { border-left-color: var(--info); }
.sev { font-weight: 700; text-transform: uppercase; font-size: 12px; margin-right: 8px; }
.sev.error { color: var(--error); } .sev.warning { color: var(--warning); } .sev.info { color: var(--info); }
.where { color: var(--muted); font-size: 13px; margin-left: 8px; }
table { border-collapse: collapse; background: #fff; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.evidence td:first-child { font-family: ui-monospace, monospace; word-break: break-all;
                                max-width: 520px; color: #0550ae; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; }
.fix { background: #eef7ee; border-radius: 4px; padding: 6px 10px; }
.note { color: var(--muted); font-size: 13px; font-style: italic; }
.plot { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; margin: 12px 0; padding: 4px; }
.status-ERROR, .stage-fail, .stage-error { color: var(--error); font-weight: 600; }
.status-TERMINATED, .stage-pass { color: var(--ok); }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; }
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


class HtmlFormatter(Formatter):
    name = "html"
    wants_file = True

    @classmethod
    def from_options(cls, options: FormatOptions) -> HtmlFormatter:
        try:
            import plotly  # noqa: F401 - fail now, before the work, not after it
        except ImportError:
            raise FormatUnavailable(
                "--format html needs plotly, which is not installed: pip install plotly"
            ) from None
        return cls()

    def render(self, report: Report) -> str:
        return "".join(self._page(report))

    def _page(self, report: Report) -> Iterator[str]:
        data = report.data
        figures = self._figures(report)
        title = f"ray-doctor {data['command']} — {short_path(data['target']['path'])}"
        yield "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        yield f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">\n"
        yield "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        yield f"<title>{esc(title)}</title>\n<style>{STYLE}</style>\n"
        if figures:
            from plotly.offline import get_plotlyjs

            yield f"<script>{get_plotlyjs()}</script>\n"
        yield "</head>\n<body>\n"
        yield from _header(data)
        yield "<main>\n"
        yield from _nav(data, figures)
        if data.get("stages"):
            yield from _stages(data)
        yield from _findings(data)
        if figures:
            yield from _plots_section(figures)
        if data.get("trials"):
            yield from _trials(data)
        if data.get("checkpoints"):
            yield from _checkpoints(data)
        if data["errors"]:
            yield from _errors(data)
        tool = data["tool"]
        yield (
            f"<footer>{esc(tool['name'])} {esc(tool['version'])} · report schema "
            f"{esc(data['schema_version'])} · generated {esc(data.get('generated_at'))}</footer>\n"
        )
        yield "</main>\n</body>\n</html>\n"

    def _figures(self, report: Report) -> list:
        if report.scan is None:
            return []
        from ray_doctor.report._plots import figures

        return figures(report.scan, report.findings)


def _header(data: dict[str, Any]) -> Iterator[str]:
    code = data["summary"]["exit_code"]
    yield "<header>\n"
    yield (
        f"<h1>ray-doctor {esc(data['command'])}<span class='verdict v{code}'>"
        f"{esc(verdict(data))}</span></h1>\n"
    )
    yield f"<div class='target'>{esc(subject_line(data))}</div>\n</header>\n"


def _nav(data: dict[str, Any], figures: list) -> Iterator[str]:
    summary = data["summary"]
    counts = summary["findings_by_severity"]
    yield "<div class='cards'>\n"
    for severity in ("error", "warning", "info"):
        yield f"<div class='card {severity}'><b>{counts[severity]:,}</b>{severity}</div>\n"
    if "trials" in summary:
        yield f"<div class='card'><b>{summary['trials']:,}</b>trials</div>\n"
    if "checkpoints" in summary:
        yield f"<div class='card'><b>{summary['checkpoints']:,}</b>checkpoints</div>\n"
    if "stages" in summary:
        yield f"<div class='card'><b>{summary['stages']:,}</b>smoke stages</div>\n"
    yield f"<div class='card'><b>{summary['exit_code']}</b>exit code</div>\n</div>\n"
    links = [("findings", "Findings")]
    if figures:
        links.append(("plots", "Plots"))
    for key, label in (("stages", "Stages"), ("trials", "Trials"), ("checkpoints", "Checkpoints")):
        if data.get(key):
            links.append((key, label))
    if data["errors"]:
        links.append(("errors", "Could not read"))
    yield "<nav>" + "".join(f"<a href='#{key}'>{label}</a>" for key, label in links) + "</nav>\n"


def _findings(data: dict[str, Any]) -> Iterator[str]:
    groups = finding_groups(data)
    yield f"<section id='findings'>\n<h2>Findings <small>({esc(counts_line(data))})</small></h2>\n"
    if not groups:
        yield "<p>No findings.</p>\n"
    if wants_summary(groups):
        yield from _what_happened(groups)
    base = evidence_base(data)
    for group in groups[:MAX_FINDINGS]:
        yield from _finding(group, base)
    if len(groups) > MAX_FINDINGS:
        yield f"<p class='note'>{len(groups) - MAX_FINDINGS:,} more findings: see --format json.</p>\n"
    yield "</section>\n"


def _what_happened(groups: list[FindingGroup]) -> Iterator[str]:
    """Causes ranked by trials affected, across every experiment of the report."""
    yield "<h3>What happened</h3>\n<table class='causes'>\n"
    for group in ranked_causes(groups):
        severity = group.lead["severity"]
        spread = f" in {group.experiments} experiments" if group.experiments > 1 else ""
        yield (
            f"<tr><td class='sev {severity}'>{esc(group.count_label)}{spread}</td>"
            f"<td><code>{esc(group.lead['rule'])}</code></td><td>{esc(group.cause)}</td></tr>\n"
        )
    yield "</table>\n"


def _finding(group: FindingGroup, base: str | None) -> Iterator[str]:
    finding = group.lead
    severity = finding["severity"]
    about = where(finding) if group.size == 1 else group.count_label
    yield f"<article class='finding {severity}' data-group='{esc(group.id)}'>\n<h3>"
    yield f"<span class='sev {severity}'>{SEVERITY_MARK[severity]} {severity}</span>"
    yield f"<code>{esc(finding['rule'])}</code> {esc(finding['title'])}"
    if about:
        yield f"<span class='where'>{esc(about)}</span>"
    yield f"</h3>\n<p>{esc(message(group))}</p>\n"
    if group.size > 1:
        yield f"<p class='members'><b>Trials:</b> {esc(group.members(shown=20))}</p>\n"
    if finding["evidence"]:
        label = "evidence" if group.size == 1 else f"evidence of {finding['trial_id']}"
        yield f"<table class='evidence'><tr><th>{esc(label)}</th><th>what it says</th></tr>\n"
        for item in finding["evidence"]:
            yield (
                f"<tr><td>{esc(location(item, base))}</td>"
                f"<td><code>{esc(item.get('excerpt'))}</code></td></tr>\n"
            )
        yield "</table>\n"
    yield f"<p class='fix'><b>Fix:</b> {esc(finding['fix'])}</p>\n"
    for related in finding.get("related", []):
        yield f"<p class='note'>Also <code>{esc(related['rule'])}</code>: {esc(related['message'])}</p>\n"
    url = docs_link(finding["docs"])
    docs = f"<a href='{esc(url)}'>{esc(finding['docs'])}</a>" if "://" in url else esc(url)
    yield f"<p class='note'>Docs: {docs}</p>\n</article>\n"


def _plots_section(figures: list) -> Iterator[str]:
    import plotly.io as pio

    yield "<section id='plots'>\n<h2>Plots</h2>\n"
    for figure in figures:
        height = figure.figure["layout"].get("height", 460)
        yield f"<div class='plot' data-kind='{figure.kind}'>\n"
        yield pio.to_html(
            figure.figure,
            include_plotlyjs=False,
            full_html=False,
            validate=False,
            div_id=figure.ident,
            default_height=f"{height}px",
            config={"displaylogo": False, "responsive": True},
        )
        for note in figure.notes:
            yield f"<p class='note'>{esc(note)}</p>\n"
        yield "</div>\n"
    yield "</section>\n"


def _trials(data: dict[str, Any]) -> Iterator[str]:
    trials = sorted(data["trials"], key=lambda t: STATUS_ORDER.get(t["status"], 2))
    yield f"<section id='trials'>\n<h2>Trials <small>({len(trials):,})</small></h2>\n<table>\n"
    yield (
        "<tr><th>experiment</th><th>trial</th><th>status</th><th>iterations</th><th>metric</th>"
        "<th>failures</th><th>restarts</th><th>last checkpoint</th><th>last error</th></tr>\n"
    )
    for trial in trials[:MAX_TRIAL_ROWS]:
        metric = trial.get("metric")
        value = metric["value"] if metric else ""
        value = f"{value:.4g}" if isinstance(value, float) else value
        shown = f"{metric['name']}={value}" if metric else ""
        yield (
            f"<tr><td>{esc(trial['experiment'])}</td><td>{esc(trial['trial_id'])}</td>"
            f"<td class='status-{esc(trial['status'])}'>{esc(trial['status'])}</td>"
            f"<td class='num'>{esc(trial['iterations'])}</td>"
            f"<td class='num'>{esc(shown)}</td>"
            f"<td class='num'>{trial['failures']}</td><td class='num'>{trial['restarts']}</td>"
            f"<td>{esc(trial['last_checkpoint'])}</td><td>{esc(trial['last_error'])}</td></tr>\n"
        )
    yield "</table>\n"
    if len(trials) > MAX_TRIAL_ROWS:
        yield (
            f"<p class='note'>{MAX_TRIAL_ROWS:,} of {len(trials):,} trials listed (problem trials "
            "first); --format json lists them all.</p>\n"
        )
    yield "</section>\n"


def _checkpoints(data: dict[str, Any]) -> Iterator[str]:
    base = evidence_base(data)
    checkpoints = data["checkpoints"]
    yield f"<section id='checkpoints'>\n<h2>Checkpoints <small>({len(checkpoints):,})</small></h2>\n"
    yield "<table>\n<tr><th>checkpoint</th><th>trial</th><th>files</th><th>tensors</th><th>status</th></tr>\n"
    for checkpoint in checkpoints[:MAX_TRIAL_ROWS]:
        status = checkpoint_status(checkpoint)
        formats = ", ".join(sorted({f["format"] for f in checkpoint["files"]}))
        yield (
            f"<tr><td>{esc(short_path(checkpoint['path'], base))}</td>"
            f"<td>{esc(checkpoint.get('trial_id'))}</td><td>{esc(formats)}</td>"
            f"<td class='num'>{checkpoint['tensors']}</td><td>{esc(status)}</td></tr>\n"
        )
    yield "</table>\n</section>\n"


def _stages(data: dict[str, Any]) -> Iterator[str]:
    yield "<section id='stages'>\n<h2>Smoke stages</h2>\n<table>\n"
    yield "<tr><th></th><th>stage</th><th>status</th><th>time</th><th>message</th></tr>\n"
    for stage in data["stages"]:
        status = stage["status"]
        yield (
            f"<tr><td>{STAGE_MARK.get(status, '')}</td><td><code>{esc(stage['name'])}</code> "
            f"{esc(stage['title'])}</td><td class='stage-{esc(status)}'>{esc(status)}</td>"
            f"<td class='num'>{stage['duration_s']:.1f} s</td><td>{esc(stage['message'])}</td></tr>\n"
        )
    yield "</table>\n"
    environment = data.get("environment") or {}
    nodes = environment.get("nodes") or []
    if nodes:
        yield f"<p class='note'>{plural(len(nodes), 'node')} fingerprinted; see --format json.</p>\n"
    yield "</section>\n"


def _errors(data: dict[str, Any]) -> Iterator[str]:
    errors = data["errors"]
    title = "Could not run" if data["summary"]["exit_code"] == 2 else "Could not read"
    yield f"<section id='errors'>\n<h2>{title} <small>({len(errors):,})</small></h2>\n<ul>\n"
    for error in errors[:MAX_ERRORS]:
        yield f"<li><code>{esc(short_path(error['path']))}</code>: {esc(error['reason'])}</li>\n"
    if len(errors) > MAX_ERRORS:
        yield f"<li class='note'>… {len(errors) - MAX_ERRORS:,} more (see --format json)</li>\n"
    yield "</ul>\n</section>\n"
