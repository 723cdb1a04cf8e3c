"""Was a stage's work ever scheduled? Its placement groups, read from Ray while it runs.

Ray never fails a request it cannot place: the placement group waits in PENDING, and a stage
would wait out its whole budget and then look like a hang on the user's side (a collective
timeout, a trial that never reported). So while a stage's Tune or Train run goes on, its
placement groups are watched: one that no node set of this cluster can hold ends the stage at
once as `resources-insufficient`, with what Ray was asked for. One that fits but stays pending
while nothing of smoke's own holds resources is waiting on someone else's work.

Smoke's placement groups are told from anyone else's by the job id every placement group id
ends with: Tune (in the driver) and Train V2's controller (an actor of the driver's job)
create theirs under the smoke driver's job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray_doctor.smoke._resources import Bundle, NodeResources, fits, place

POLL_S = 0.5


@dataclass(frozen=True)
class Group:
    """One placement group as Ray's table shows it."""

    group_id: str
    bundles: list[Bundle]
    state: str  # PENDING, CREATED, REMOVED, RESCHEDULING
    infeasible: bool  # Ray or the node arithmetic says no node set here can ever hold it

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "RESCHEDULING")


@dataclass
class Unscheduled:
    """Why a stage's work never started: what it asked Ray for, and whether it can ever fit."""

    bundles: list[Bundle]
    infeasible: bool  # False: it fits the cluster but stayed pending behind other work
    seconds: float  # how long it was seen pending


@dataclass
class Watched:
    finished: bool
    value: Any = None
    error: BaseException | None = None
    unscheduled: Unscheduled | None = None


def own_groups(nodes: list[NodeResources]) -> list[Group]:
    """This job's placement groups (empty when Ray's table cannot be read)."""
    import ray
    from ray.util.placement_group import placement_group_table

    try:
        job = ray.get_runtime_context().get_job_id()
        table = placement_group_table()
    except Exception:
        return []
    groups = []
    for group_id, entry in table.items():
        if not group_id.endswith(job):
            continue
        bundles = [
            {k: float(v) for k, v in bundle.items()}
            for _, bundle in sorted((entry.get("bundles") or {}).items())
        ]
        scheduling = (entry.get("stats") or {}).get("scheduling_state", "")
        infeasible = scheduling == "INFEASIBLE" or bool(place(bundles, nodes))
        groups.append(Group(group_id, bundles, entry.get("state", ""), infeasible))
    return groups


def matches(group: Group, asked: list[Bundle]) -> bool:
    """Is `group` the stage's request: as many bundles, each holding at least what one of
    the stage's bundles asked (Ray Train V1 adds its trainer actor's CPU to rank 0's)?"""
    if len(group.bundles) != len(asked):
        return False
    wanted = sorted(asked, key=lambda b: sorted(b.items()))
    got = sorted(group.bundles, key=lambda b: sorted(b.items()))
    return all(fits(want, have) for want, have in zip(wanted, got, strict=True))


class Watch:
    """Follows the stage's placement groups from one poll to the next."""

    def __init__(self, asked: list[Bundle], nodes: list[NodeResources], wait_s: float) -> None:
        self.asked, self.nodes, self.wait_s = asked, nodes, wait_s
        self.pending_since: float | None = None  # pending while nothing of ours held resources
        self.last: Group | None = None  # the stage's group last seen pending

    def poll(self) -> Unscheduled | None:
        """An `Unscheduled` when the stage should stop waiting; None to keep waiting."""
        groups = own_groups(self.nodes)
        mine = [g for g in groups if g.pending and matches(g, self.asked)]
        self.last = mine[0] if mine else None
        if self.last is None:
            self.pending_since = None
            return None
        if self.last.infeasible:
            return Unscheduled(self.last.bundles, True, 0.0)
        # Smoke's own stages queue for each other on a small cluster: that is not a shortage.
        ours_running = any(g.state == "CREATED" for g in groups)
        now = time.monotonic()
        if ours_running:
            self.pending_since = None
        elif self.pending_since is None:
            self.pending_since = now
        elif now - self.pending_since >= self.wait_s:
            return Unscheduled(self.last.bundles, False, now - self.pending_since)
        return None


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """`fn()` started in a daemon thread; its "value" or "error" lands in the box."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="ray-doctor-stage", daemon=True)
    thread.start()
    return thread, box


def run_watched(
    fn: Callable[[], Any],
    seconds: float,
    asked: list[Bundle],
    nodes: list[NodeResources],
    wait_s: float,
) -> Watched:
    """`fn()` in a thread for at most `seconds`, given up as soon as its placement group
    turns out never to be scheduled. A run that ran out of time with its group still pending
    says so too: it was never scheduled, whatever else timed out."""
    thread, box = in_thread(fn)
    watch = Watch(asked, nodes, wait_s)
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(POLL_S)
        if not thread.is_alive():
            break
        unscheduled = watch.poll()
        if unscheduled is not None:
            return Watched(False, unscheduled=unscheduled)
    if thread.is_alive():
        watch.poll()
        if watch.last is not None:
            pending = Unscheduled(watch.last.bundles, False, time.monotonic() - started)
            return Watched(False, unscheduled=pending)
        return Watched(False)
    return Watched(True, box.get("value"), box.get("error"))
