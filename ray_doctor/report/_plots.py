"""The HTML report's plots, as plotly figure dicts (plotly's JSON figure format).

Built from the typed scan, never from files directly: result rows come through
`Trial.history_rows()`, read only for the trials that are plotted. Every plot is capped so a
10,000-trial sweep gives a handful of readable figures, and each figure says what it left out:

- metric over iterations: the trials that failed, restarted or went non-finite first, then the
  others, up to MAX_METRIC_TRIALS; failures, restores and NaN/Inf marked;
- timeline: start, failures, restores and end of each trial, up to MAX_TIMELINE_TRIALS;
- for each config-correlated-failures finding, the trials' hyper-parameters coloured by outcome.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ray_doctor.findings import Finding
from ray_doctor.model import Experiment, ScanResult, Trial, TrialStatus
from ray_doctor.report._report import main_metric
from ray_doctor.rules.config_correlated_failures import _flatten

MAX_EXPERIMENTS = 5  # experiments plotted (those with findings first)
MAX_METRIC_TRIALS = 25
MAX_TIMELINE_TRIALS = 200
MAX_POINTS = 2_000  # points per trial line; longer histories are thinned evenly
MAX_SCATTER_POINTS = 5_000
MAX_HISTORY_ROWS = 1_000_000  # rows read per trial: a runaway result.json stops here
STATUS_COLOR = {
    "ERROR": "#d62728",
    "TERMINATED": "#2ca02c",
    "RUNNING": "#ff7f0e",
    "PENDING": "#bcbd22",
    "PAUSED": "#bcbd22",
    "UNKNOWN": "#7f7f7f",
}
FAILURE_COLOR = "#d62728"
RESTORE_COLOR = "#1f77b4"
NONFINITE_COLOR = "#9467bd"


@dataclass
class Figure:
    """One plot: an id for the page, a title, the plotly figure and what was left out."""

    ident: str
    title: str
    figure: dict[str, Any]
    kind: str  # "metric", "timeline" or "config"
    notes: list[str] = field(default_factory=list)


@dataclass
class Trace:
    """What a trial's result rows say, for plotting."""

    x: list[Any] = field(default_factory=list)  # training_iteration
    y: list[float | None] = field(default_factory=list)
    restores: list[tuple[Any, float | None, float | None]] = field(
        default_factory=list
    )  # x, y, time
    last_before_restore: list[tuple[Any, float | None]] = field(default_factory=list)
    nonfinite: list[tuple[Any, str]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def figures(scan: ScanResult, findings: list[Finding]) -> list[Figure]:
    with_findings = {f.experiment for f in findings}
    experiments = sorted(scan.experiments, key=lambda e: e.name not in with_findings)
    out: list[Figure] = []
    traces: dict[int, Trace] = {}
    for number, experiment in enumerate(experiments[:MAX_EXPERIMENTS]):
        prefix = f"plot-{number}"
        metric = _metric_name(experiment)
        if metric:
            figure = _metric_figure(experiment, metric, traces, prefix)
            if figure:
                out.append(figure)
        figure = _timeline_figure(experiment, traces, prefix)
        if figure:
            out.append(figure)
        own = [f for f in findings if f.experiment == experiment.name]
        out += _config_figures(experiment, own, prefix)
    if len(experiments) > MAX_EXPERIMENTS and out:
        out[0].notes.append(
            f"Plots for {MAX_EXPERIMENTS} of {len(experiments):,} experiments "
            "(those with findings first)."
        )
    return out


def interesting(trial: Trial) -> bool:
    """A trial worth a line of its own: it failed, restarted or reported NaN/Inf."""
    history = trial.history
    return bool(
        trial.status == TrialStatus.ERROR
        or trial.failures
        or (history and (history.restart_count or history.nonfinite))
    )


def _pick(trials: list[Trial], limit: int) -> list[Trial]:
    ordered = sorted(trials, key=lambda t: not interesting(t))
    return ordered[:limit]


def _metric_name(experiment: Experiment) -> str | None:
    preferred = experiment.runner.get("_metric")
    if isinstance(preferred, str) and preferred:
        return preferred
    names = Counter(m[0] for t in experiment.trials if (m := main_metric(t)))
    return names.most_common(1)[0][0] if names else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _trace(trial: Trial, metric: str | None, cache: dict[int, Trace]) -> Trace:
    """One pass over a trial's rows (cached: the metric plot and the timeline share it)."""
    if id(trial) in cache:
        return cache[id(trial)]
    trace = Trace()
    previous: tuple[Any, float | None] | None = None
    if trial.history_rows is not None:
        for count, row in enumerate(trial.history_rows()):
            if count >= MAX_HISTORY_ROWS:
                break
            x = row.get("training_iteration", count + 1)
            value = row.get(metric) if metric else None
            y = _number(value)
            if y is not None and not math.isfinite(y):
                trace.nonfinite.append((x, "NaN" if math.isnan(y) else "Infinity"))
                y = None
            timestamp = _number(row.get("timestamp"))
            if row.get("iterations_since_restore") == 1 and previous is not None:
                trace.restores.append((x, y, timestamp))
                trace.last_before_restore.append(previous)
            trace.x.append(x)
            trace.y.append(y)
            if timestamp is not None:
                trace.times.append(timestamp)
            previous = (x, y)
    cache[id(trial)] = trace
    return trace


def _thin(xs: list[Any], ys: list[Any]) -> tuple[list[Any], list[Any]]:
    if len(xs) <= MAX_POINTS:
        return xs, ys
    step = math.ceil(len(xs) / MAX_POINTS)
    keep = list(range(0, len(xs), step))
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _metric_figure(
    experiment: Experiment, metric: str, cache: dict[int, Trace], prefix: str
) -> Figure | None:
    with_rows = [t for t in experiment.trials if t.history_rows is not None]
    chosen = _pick(with_rows, MAX_METRIC_TRIALS)
    data: list[dict[str, Any]] = []
    failures: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    restores: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    nonfinite: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    for trial in chosen:
        trace = _trace(trial, metric, cache)
        if not trace.x:
            continue
        xs, ys = _thin(trace.x, trace.y)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": trial.trial_id,
                "x": xs,
                "y": ys,
                "line": {"width": 2.5 if interesting(trial) else 1.2},
                "hovertemplate": f"{trial.trial_id}<br>iteration %{{x}}<br>{metric} %{{y}}<extra></extra>",
            }
        )
        _mark_failures(trial, trace, failures)
        for x, y, _ in trace.restores:
            restores["x"].append(x)
            restores["y"].append(y)
            restores["text"].append(f"{trial.trial_id}: restored, iteration {x}")
        last_y = {x: y for x, y in zip(trace.x, trace.y, strict=True) if y is not None}
        for x, value in trace.nonfinite:
            nonfinite["x"].append(x)
            nonfinite["y"].append(last_y.get(x, _last_finite(trace.y)))
            nonfinite["text"].append(f"{trial.trial_id}: {metric} = {value} at iteration {x}")
    if not data:
        return None
    data += _markers(failures, "failure", "x", FAILURE_COLOR, 13)
    data += _markers(restores, "restored", "triangle-up", RESTORE_COLOR, 12)
    data += _markers(nonfinite, "NaN / Inf", "diamond", NONFINITE_COLOR, 11)
    title = f"{experiment.name}: {metric} by iteration"
    figure = _figure(data, title, "training_iteration", metric)
    notes = []
    if len(with_rows) > len(chosen):
        notes.append(
            f"{len(chosen)} of {len(with_rows):,} trials shown: those that failed, restarted "
            "or reported NaN/Inf first."
        )
    if any(len(_trace(t, metric, cache).x) > MAX_POINTS for t in chosen):
        notes.append(f"Long histories are thinned to {MAX_POINTS:,} points per trial.")
    return Figure(f"{prefix}-metric", title, figure, "metric", notes)


def _mark_failures(trial: Trial, trace: Trace, out: dict[str, list[Any]]) -> None:
    """A failure sits on the last row before the restore it caused; failures with no restore
    in the rows (the last one, or retries that failed before reporting) on the last row."""
    for number, failure in enumerate(trial.failures):
        if number < len(trace.last_before_restore):
            x, y = trace.last_before_restore[number]
        elif trace.x:
            x, y = trace.x[-1], _last_finite(trace.y)
        else:
            continue
        out["x"].append(x)
        out["y"].append(y)
        out["text"].append(f"{trial.trial_id}: failure {number + 1}: {failure.summary}")
    if not trial.failures and trial.status == TrialStatus.ERROR and trace.x:
        out["x"].append(trace.x[-1])
        out["y"].append(_last_finite(trace.y))
        out["text"].append(f"{trial.trial_id}: failed (no error file)")


def _last_finite(values: list[float | None]) -> float | None:
    for value in reversed(values):
        if value is not None:
            return value
    return None


def _markers(points: dict[str, list[Any]], name: str, symbol: str, color: str, size: int) -> list:
    if not points["x"]:
        return []
    return [
        {
            "type": "scatter",
            "mode": "markers",
            "name": name,
            "x": points["x"],
            "y": points["y"],
            "text": points["text"],
            "hovertemplate": "%{text}<extra></extra>",
            "marker": {
                "symbol": symbol,
                "size": size,
                "color": color,
                "line": {"width": 1, "color": "#222"},
            },
        }
    ]


def _figure(data: list[dict[str, Any]], title: str, x_title: str, y_title: str) -> dict[str, Any]:
    return {
        "data": data,
        "layout": {
            "title": {"text": title},
            "xaxis": {"title": {"text": x_title}},
            "yaxis": {"title": {"text": y_title}},
            "hovermode": "closest",
            "margin": {"l": 70, "r": 30, "t": 60, "b": 60},
            "legend": {"orientation": "v"},
            "template": {"layout": {"paper_bgcolor": "#fff", "plot_bgcolor": "#f7f7f9"}},
        },
    }


def _utc(timestamp: float | None) -> str | None:
    if timestamp is None or not math.isfinite(timestamp) or timestamp <= 0:
        return None
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _clock_offset(trial: Trial) -> float | None:
    """Seconds the node's clock (Ray's `date` strings, local time) is ahead of UTC, from the
    last result's `date` and `timestamp`: error.txt's failure times are on that clock."""
    date, stamp = trial.last_result.get("date"), _number(trial.last_result.get("timestamp"))
    local = _parse_ray_date(date) if isinstance(date, str) else None
    if local is None or stamp is None:
        return None
    return round((local - stamp) / 900) * 900  # time zones are whole quarter hours


def _parse_ray_date(text: str | None) -> float | None:
    if not text:
        return None
    try:
        moment = datetime.strptime(text, "%Y-%m-%d_%H-%M-%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return moment.timestamp()


def _timeline_figure(experiment: Experiment, cache: dict[int, Trace], prefix: str) -> Figure | None:
    started = [t for t in experiment.trials if t.start_time]
    chosen = sorted(_pick(started, MAX_TIMELINE_TRIALS), key=lambda t: t.start_time or 0)
    if not chosen:
        return None
    # Trials that never reported have no clock of their own: the experiment's serves.
    shared_offset = next(
        (o for t in experiment.trials if (o := _clock_offset(t)) is not None), None
    )
    spans: dict[str, dict[str, list[Any]]] = {}
    failures: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    restores: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    ends: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    for trial in chosen:
        trace = _trace(trial, None, cache) if interesting(trial) else Trace()
        end = max([trial.last_result_time or 0, *(trace.times or [0])]) or None
        offset = _clock_offset(trial)
        offset = shared_offset if offset is None else offset
        failure_times = []
        for failure in trial.failures:
            local = _parse_ray_date(failure.time)
            if local is not None and offset is not None:
                failure_times.append((local - offset, failure.summary))
        end = max([end or 0, *(t for t, _ in failure_times)]) or None
        span = spans.setdefault(trial.status.value, {"x": [], "y": [], "text": []})
        start_text, end_text = _utc(trial.start_time), _utc(end) or _utc(trial.start_time)
        span["x"] += [start_text, end_text, None]
        span["y"] += [trial.trial_id, trial.trial_id, None]
        label = f"{trial.trial_id} ({trial.status.value})"
        span["text"] += [f"{label} started", f"{label} last seen", ""]
        ends["x"].append(end_text)
        ends["y"].append(trial.trial_id)
        ends["text"].append(f"{label}: ended {end_text} UTC")
        for when, summary in failure_times:
            failures["x"].append(_utc(when))
            failures["y"].append(trial.trial_id)
            failures["text"].append(f"{trial.trial_id}: failed at {_utc(when)} UTC: {summary}")
        for x, _, when in trace.restores:
            restores["x"].append(_utc(when))
            restores["y"].append(trial.trial_id)
            restores["text"].append(
                f"{trial.trial_id}: restored at {_utc(when)} UTC (iteration {x})"
            )
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": status,
            "x": points["x"],
            "y": points["y"],
            "text": points["text"],
            "hovertemplate": "%{text}<extra></extra>",
            "line": {"width": 6, "color": STATUS_COLOR.get(status, "#7f7f7f")},
            "marker": {"size": 7, "color": STATUS_COLOR.get(status, "#7f7f7f")},
        }
        for status, points in sorted(spans.items())
    ]
    data += _markers(failures, "failure", "x", FAILURE_COLOR, 13)
    data += _markers(restores, "restored", "triangle-up", RESTORE_COLOR, 12)
    title = f"{experiment.name}: timeline of trials"
    figure = _figure(data, title, "time (UTC)", "trial")
    figure["layout"]["xaxis"]["type"] = "date"
    figure["layout"]["yaxis"].update(type="category", automargin=True)
    figure["layout"]["height"] = max(320, min(2400, 90 + 22 * len(chosen)))
    notes = []
    if len(started) > len(chosen):
        notes.append(
            f"{len(chosen)} of {len(started):,} trials shown: those that failed or restarted first."
        )
    return Figure(f"{prefix}-timeline", title, figure, "timeline", notes)


def _config_key(finding: Finding, experiment: Experiment) -> str | None:
    """The hyper-parameter a config-correlated-failures finding is about (its subject is
    `config:<experiment path>:<key>`)."""
    prefix = f"config:{experiment.path}:"
    subject = finding.subject or ""
    return subject[len(prefix) :] if subject.startswith(prefix) else None


def _config_figures(experiment: Experiment, findings: list[Finding], prefix: str) -> list[Figure]:
    out = []
    for number, finding in enumerate(f for f in findings if f.rule == "config-correlated-failures"):
        key = _config_key(finding, experiment)
        if key is None:
            continue
        trials = [
            t for t in experiment.trials if t.status in (TrialStatus.ERROR, TrialStatus.TERMINATED)
        ]
        # The rule's own flattening, so its key names the same column here.
        configs = {t.trial_id: _flatten(t.config) for t in trials}
        other = _second_axis(configs, key)
        metric = _metric_name(experiment)
        chosen = sorted(trials, key=lambda t: t.status != TrialStatus.ERROR)[:MAX_SCATTER_POINTS]
        groups: dict[str, dict[str, list[Any]]] = {}
        for index, trial in enumerate(chosen):
            config = configs[trial.trial_id]
            if other is not None:
                y = config.get(other)
            elif metric and trial.last_result.get(metric) is not None:
                y = _number(trial.last_result.get(metric))
            else:
                y = index
            group = groups.setdefault(trial.status.value, {"x": [], "y": [], "text": []})
            group["x"].append(config.get(key))
            group["y"].append(y)
            shown = ", ".join(f"{k}={v}" for k, v in list(config.items())[:8])
            group["text"].append(f"{trial.trial_id} ({trial.status.value})<br>{shown}")
        data = [
            {
                "type": "scatter",
                "mode": "markers",
                "name": "failed"
                if status == "ERROR"
                else "finished"
                if status == "TERMINATED"
                else status,
                "x": points["x"],
                "y": points["y"],
                "text": points["text"],
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {
                    "size": 12,
                    "color": STATUS_COLOR.get(status, "#7f7f7f"),
                    "symbol": "x" if status == "ERROR" else "circle",
                    "line": {"width": 1, "color": "#222"},
                },
            }
            for status, points in sorted(groups.items())
        ]
        y_title = other or (metric if metric else "trial")
        title = f"{experiment.name}: {key} against {y_title}, by outcome"
        figure = _figure(data, title, key, y_title)
        figure["layout"]["annotations"] = [
            {
                "text": finding.message,
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": 1.08,
                "showarrow": False,
                "align": "left",
                "font": {"size": 12},
            }
        ]
        notes = []
        if len(trials) > len(chosen):
            notes.append(
                f"{len(chosen):,} of {len(trials):,} trials shown (the failed ones first)."
            )
        out.append(Figure(f"{prefix}-config-{number}", title, figure, "config", notes))
    return out


def _second_axis(configs: dict[str, dict[str, Any]], key: str) -> str | None:
    """The other hyper-parameter that varies most across trials, to spread the points."""
    counts = Counter()
    for config in configs.values():
        for name, value in config.items():
            if name != key:
                counts[(name, repr(value))] += 1
    distinct = Counter(name for name, _ in counts)
    varying = [name for name, n in distinct.most_common() if n >= 2]
    return varying[0] if varying else None
