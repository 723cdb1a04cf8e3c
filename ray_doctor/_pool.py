"""Forked worker processes, shared by the trial-dir and session-log readers and the rules.

Reading is CPU-bound Python that holds the GIL, so a big local read is spread over processes.
`fork` makes a reader start in milliseconds with every module already imported.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # concurrent.futures.process costs ~15 ms to import; most runs never fork
    from concurrent.futures import ProcessPoolExecutor


def cpus() -> int:
    """The CPUs this process may run on (a container's or `taskset`'s share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork() -> bool:
    return hasattr(os, "fork") and cpus() >= 2


def forked_pool(processes: int) -> ProcessPoolExecutor:
    """Reader processes that leave Ctrl-C to the parent. The caller shuts the pool down: on an
    interrupt with `wait=True, cancel_futures=True` (each reader ends after its task: one left
    behind would hold the caller's stdout open)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(
        processes,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_ignore_interrupts,
    )


def _ignore_interrupts() -> None:
    """In a reader process: Ctrl-C is the parent's to handle (a terminal sends it to the
    whole process group; a reader that took it would print a traceback)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
