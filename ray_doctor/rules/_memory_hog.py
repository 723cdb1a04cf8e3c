"""Whose memory it was: the process a memory kill notice says held the memory.

Ray's memory monitor kills by policy (the most recently scheduled task, then a whole worker
group), not by size, so the first process its notice names is often a bystander. The notice
says who held the memory twice: "actual memory used" per killed worker, and a "Top 10 memory
users" table (PID, GB, command) of the whole node. The largest entry is the hog; it is named
as the trial, the Train rank or the Ray actor that pid was, and the other killed processes are
collateral.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ray_doctor.model import Experiment
from ray_doctor.rules._events import matching_events

# Ray >= 2.56: "(Task: ..., task name=RayTrainWorker.__init__, ..., pid=32239, actual memory
# used=2.12GB, worker ID=...)"; Ray 2.2-2.55: "(task ID: ..., name=train, pid=11362, memory
# used=1.25GB)".
KILLED = (
    re.compile(
        r"task name=(?P<name>[^,]+), .*?pid=(?P<pid>\d+), actual memory used=(?P<gb>[\d.]+)GB"
    ),
    re.compile(r"name=(?P<name>[^,]+), pid=(?P<pid>\d+), memory used=(?P<gb>[\d.]+)GB"),
)
# A row of "Top 10 memory users: PID MEM(GB) COMMAND" (tabs; `;` ends a row in raylet.out).
TABLE_ROW = re.compile(r"(?<![\d.])(?P<pid>\d+)\t(?P<gb>[\d.]+)\t(?P<name>[^\t\n;]+)")
WORKER_RANK = re.compile(r"pid=(?P<pid>\d+)\) world_rank=(?P<rank>\d+)")


@dataclass(frozen=True)
class MemoryUse:
    pid: int
    gb: float
    name: str


def may_attribute(line: str) -> bool:
    """Whether a log line can add to an attribution: a node-table row holds a tab, a killed
    worker's entry "memory used=". A long run keeps tens of thousands of log lines; searching
    them all for table rows cost more than the rest of the rule."""
    return "\t" in line or "memory used=" in line


def _uses(pattern: re.Pattern[str], text: str) -> list[MemoryUse]:
    return [
        MemoryUse(int(m["pid"]), float(m["gb"]), m["name"].strip()) for m in pattern.finditer(text)
    ]


def killed(text: str) -> list[MemoryUse]:
    """The processes the notice says it killed, with the memory each used."""
    for pattern in KILLED:
        found = _uses(pattern, text)
        if found:
            return list({use.pid: use for use in found}.values())
    return []


def hog(text: str) -> MemoryUse | None:
    """The largest memory user the notice shows: its node table, else its killed list."""
    table = _uses(TABLE_ROW, text)
    candidates = table or killed(text)
    return max(candidates, key=lambda use: use.gb) if candidates else None


def owner(experiment: Experiment, pid: int) -> str | None:
    """What a pid was in this run: a trial (its last reported pid) or a Train rank."""
    trials = [t for t in experiment.trials if t.last_result.get("pid") == pid]
    if len(trials) == 1:
        return f"trial {trials[0].trial_id}"
    for _, found in matching_events(WORKER_RANK, experiment.events):
        if int(found["pid"]) == pid:
            return f"world rank {found['rank']}"
    return None


def describe(experiment: Experiment, text: str) -> str | None:
    """'the memory was held by world rank 1 (pid 32239, ray::RayTrainWorker, 2.12 GB);
    killed with it: PreemptionWatcher.__init__ (0.12 GB), ...' or None without a notice."""
    top = hog(text)
    if top is None:
        return None
    whose = owner(experiment, top.pid)
    held = (
        f"{whose} (pid {top.pid}, {top.name}, {top.gb:.2f} GB)"
        if whose
        else (f"pid {top.pid} ({top.name}, {top.gb:.2f} GB)")
    )
    message = f"the memory was held by {held}"
    others = [use for use in killed(text) if use.pid != top.pid]
    if others:
        shown = ", ".join(f"{use.name} ({use.gb:.2f} GB)" for use in others[:4])
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        message += f"; killed with it: {shown}{more}"
    return message


# The kernel's own record of what it killed (mm/oom_kill.c): "Killed process 3341 (python)
# total-vm:48123456kB, anon-rss:31234567kB"; torchelastic's "failed (exitcode: -9) local_rank:
# 0 (pid: 62498)".
KERNEL_KILLED = re.compile(
    r"Kill(?:ed)? process (?P<pid>\d+) \((?P<name>[^)]+)\)(?:.*?anon-rss:(?P<kb>\d+)kB)?"
)
ELASTIC_KILLED = re.compile(r"exitcode: -9\) local_rank: (?P<rank>\d+) \(pid: (?P<pid>\d+)\)")


def os_victim(experiment: Experiment, text: str) -> str | None:
    """'the kernel killed pid 3341 (python, 29.79 GB resident), world rank 1' or None."""
    kernel = KERNEL_KILLED.search(text)
    if kernel:
        pid = int(kernel["pid"])
        rss = f", {int(kernel['kb']) / 1024**2:.2f} GB resident" if kernel["kb"] else ""
        whose = owner(experiment, pid)
        return f"the kernel killed pid {pid} ({kernel['name']}{rss})" + (
            f", {whose}" if whose else ""
        )
    elastic = ELASTIC_KILLED.search(text)
    if elastic:
        return f"torchrun's local rank {elastic['rank']} (pid {elastic['pid']}) was the one killed"
    return None
