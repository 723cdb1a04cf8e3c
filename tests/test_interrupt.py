"""Ctrl-C during `inspect` of a large sweep: the partial report, exit 130, nothing left behind.

The signal goes to the whole process group, as a terminal sends it, once the progress bar
says reading has begun (stderr is a pseudo-terminal, as for a user who presses Ctrl-C).
"""

from __future__ import annotations

import os
import signal

import psutil
from terminal import inspect_on_a_terminal, large_sweep, partial_report

TRIALS = 12000  # enough that reading takes seconds on any machine: the signal lands mid-scan


def test_ctrl_c_during_a_large_inspect_leaves_the_partial_report(fixtures, tmp_path):
    sweep = large_sweep(fixtures, tmp_path, TRIALS)
    before = sorted(p.name for p in sweep.iterdir())
    with inspect_on_a_terminal(str(sweep)) as (child, terminal):
        shown = terminal.wait_for(b"reading large_sweep", child)
        assert shown and child.poll() is None, "inspect ended before the progress bar showed"
        readers = [child.pid] + [c.pid for c in psutil.Process(child.pid).children(True)]
        os.killpg(child.pid, signal.SIGINT)
        out, _ = child.communicate(timeout=120)
    report = partial_report(child, terminal.seen, out)
    read = report["experiments"][0]["trials"]
    assert 0 < read < TRIALS, "the report covers the trials read before Ctrl-C, and only those"
    assert not any(psutil.pid_exists(pid) for pid in readers[1:]), "a reader process outlived it"
    assert sorted(p.name for p in sweep.iterdir()) == before, "inspect wrote into the sweep"
