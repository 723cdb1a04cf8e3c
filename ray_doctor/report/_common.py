"""What several formats share: ordering, labels, paths and links, computed from `report.data`
so that every command's report (inspect, verify-checkpoint, smoke) goes through them alike."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

SEVERITY_RANK = {"error": 3, "warning": 2, "info": 1}
SEVERITY_MARK = {"error": "✖", "warning": "▲", "info": "●"}
STAGE_MARK = {"pass": "✔", "fail": "✖", "error": "⚠", "skip": "○"}
# Problem trials first, so a capped table still shows them.
STATUS_ORDER = {"ERROR": 0, "RUNNING": 1, "PENDING": 1, "PAUSED": 1, "UNKNOWN": 2, "TERMINATED": 3}
# Overrides the documentation base that helpUri and report links use.
DOCS_URL_ENV = "RAY_DOCTOR_DOCS_URL"


def short_path(path: str | None, base: str | None = None) -> str:
    """`path` relative to `base` (or the cwd) when it lies below it."""
    if not path:
        return ""
    for root in (base, os.getcwd()):
        if root and path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1 :]
    return path


def below(path: str, root: str | None) -> str | None:
    """`path` relative to `root` when it lies below it, else None."""
    if not root or not path.startswith("/"):
        return None
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def local_path(path: str) -> str | None:
    """The local file a path names, or None when it is not one (s3://..., node 10.0.0.3)."""
    if path.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(path).path)
    return path if path.startswith("/") else None


def anchor(
    data: dict[str, Any], evidence: list[dict[str, Any]], workspace: str | None
) -> dict[str, Any] | None:
    """The evidence a CI annotation or alert is anchored at: the first one in the checkout
    that is not experiment output (the user's own code, e.g. the frame that raised), else the
    first one in the checkout, else the first one."""
    target = data["target"]["path"]
    in_checkout = [e for e in evidence if below(local_path(e["path"]) or "", workspace) is not None]
    for item in in_checkout:
        if below(item["path"], target) is None and item["path"] != target:
            return item
    if in_checkout:
        return in_checkout[0]
    return evidence[0] if evidence else None


def evidence_base(data: dict[str, Any]) -> str | None:
    """The dir evidence paths are shown relative to: the target, unless it is a file."""
    target = data["target"]["path"]
    return None if target.endswith((".txt", ".log", ".err", ".out")) else target


def location(evidence: dict[str, Any], base: str | None = None) -> str:
    text = short_path(evidence["path"], base)
    return f"{text}:{evidence['line']}" if evidence.get("line") else text


def where(finding: dict[str, Any]) -> str:
    """'experiment / trial', what a finding is about."""
    return " / ".join(x for x in (finding.get("experiment"), finding.get("trial_id")) if x)


def by_severity(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most severe first; the builders' own order within a severity."""
    return sorted(findings, key=lambda f: -SEVERITY_RANK.get(f["severity"], 0))


def checkpoint_status(checkpoint: dict[str, Any]) -> str:
    if checkpoint["problems"]:
        return "problems"
    return "ok, latest restorable" if checkpoint.get("latest_restorable") else "ok"


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def counts_line(data: dict[str, Any]) -> str:
    counts = data["summary"]["findings_by_severity"]
    return " · ".join(
        (
            plural(counts["error"], "error"),
            plural(counts["warning"], "warning"),
            f"{counts['info']:,} info",
        )
    )


def verdict(data: dict[str, Any]) -> str:
    """One line: what the exit code means for this run."""
    summary = data["summary"]
    code = summary["exit_code"]
    if code == 2:
        return "could not run"
    if code == 3:
        return "no Ray experiment data found"
    threshold = summary.get("fail_on")
    if code == 1:
        return f"failed: findings at or above --fail-on {threshold}"
    return f"passed (--fail-on {threshold})"


def unknown_run_note(experiment: dict[str, Any], trials: list[dict[str, Any]]) -> str | None:
    """What to add when an experiment's outcome cannot be known from what was read: a Train V2
    run keeps no status or error in storage_path (unless ray-doctor's callback wrote one), so
    without its logs a failed run reads like a healthy one."""
    if experiment.get("layout") != "train-v2" or experiment.get("logs"):
        return None
    if not any(t["status"] == "UNKNOWN" for t in trials):
        return None
    return (
        "Train V2 keeps no run status or error in storage_path: whether this run failed, and "
        "why, is in the driver's output or the session logs; pass either with --logs "
        "(e.g. --logs /tmp/ray/session_latest/logs)"
    )


def subject_line(data: dict[str, Any]) -> str:
    """'inspect fixtures/x [storage]': the command and what it looked at."""
    target = data["target"]
    text = f"{data['command']} {short_path(target['path'])}"
    return f"{text} [{target['layout']}]" if target.get("layout") else text


@lru_cache(maxsize=4)
def project_url(label: str) -> str | None:
    """A URL of the installed package's metadata (pyproject [project.urls]) by its label."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        entries = metadata("ray-doctor").get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in entries:
        name, _, url = entry.partition(",")
        if name.strip().lower() == label.lower() and url.strip():
            return url.strip().rstrip("/")
    return None


@lru_cache(maxsize=1)
def docs_base_url() -> str | None:
    """Where the docs/ folder is published: $RAY_DOCTOR_DOCS_URL, else the `Documentation`
    URL in the package metadata."""
    override = os.environ.get(DOCS_URL_ENV)
    return override.rstrip("/") if override else project_url("Documentation")


def docs_link(relative: str) -> str:
    """A finding's `docs` (docs/rules/<id>.md) as an absolute URL when the base is known."""
    base = docs_base_url()
    if not base or "://" in relative:
        return relative
    return f"{base}/{relative.removeprefix('docs/')}"
