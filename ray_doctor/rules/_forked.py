"""Each rule's findings for one experiment, half of the rules in a forked process when the
experiment has many failures.

A failing sweep asks every failure that ended a trial about every signature rule: at 10,000
trials x 50 % errored that is 1.3 s on one core, after the readers have finished with both.
The rules read the model and never change it, so a forked process sees the same model without
copying it, and only its findings (plain dataclasses) come back.
"""

from __future__ import annotations

import threading
from typing import Any

from ray_doctor._pool import can_fork, forked_pool
from ray_doctor.findings import Finding
from ray_doctor.model import Experiment
from ray_doctor.rules._base import Rule
from ray_doctor.rules._signature import ended_trials

# From this many ended failures on (`ended_by`), a fork (~10 ms, and its findings pickled
# back) costs less than the half of the rules it takes away.
PARALLEL_FAILURES = 300

# What the forked process reads: inherited at the fork, never pickled.
_SHARED: list[Any] = []


def findings_by_rule(rules: list[Rule], experiment: Experiment) -> list[list[Finding]]:
    """`list(rule.check(experiment))` for each of `rules`, in their order."""
    if not _worth_a_fork(experiment):
        return [list(rule.check(experiment)) for rule in rules]
    import multiprocessing

    # This process takes rules from the front, the forked one from the back, until they meet:
    # rule costs differ 50-fold, so a fixed split left one side idle. The front holds the
    # rules that make a finding per trial (trial-error: 5,000), whose findings stay here.
    bounds = multiprocessing.get_context("fork").Array("i", [0, len(rules)])
    _SHARED[:] = [rules, experiment, bounds]
    pool = forked_pool(1)
    try:
        future = pool.submit(_check_from_the_back)
        found: dict[int, list[Finding]] = {}
        while (index := _take(bounds, front=True)) is not None:
            found[index] = list(rules[index].check(experiment))
        found.update(future.result())
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C: the fork ends with its task
        raise
    finally:
        _SHARED.clear()
    pool.shutdown()
    return [found[i] for i in range(len(rules))]


def _check_from_the_back() -> dict[int, list[Finding]]:
    rules, experiment, bounds = _SHARED
    found = {}
    while (index := _take(bounds, front=False)) is not None:
        found[index] = list(rules[index].check(experiment))
    return found


def _take(bounds: Any, front: bool) -> int | None:
    """The next rule's index from one end of what is left, or None when nothing is."""
    with bounds.get_lock():
        if bounds[0] >= bounds[1]:
            return None
        if front:
            bounds[0] += 1
            return bounds[0] - 1
        bounds[1] -= 1
        return bounds[1]


def _worth_a_fork(experiment: Experiment) -> bool:
    # A thread running at a fork (a progress bar's, a caller's) could hold a lock the child
    # then waits on forever.
    if threading.active_count() > 1 or not can_fork():
        return False
    ended = len(experiment.failures) + sum(1 for _ in ended_trials(experiment))
    return ended >= PARALLEL_FAILURES
