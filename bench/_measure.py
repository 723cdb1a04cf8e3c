"""Wall time and peak RSS of a command, measured the honest way.

Not `os.wait4`'s ru_maxrss: on Linux a child's maximum RSS starts at its parent's (the mm is
copied by fork and its high-water mark carried over exec), so a bench process that built a
2 GB checkpoint would report 2 GB for every child. GNU time's own process is tiny, so running
the command under `/usr/bin/time -f %M` gives the child's real peak.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

TIME = shutil.which("time") or "/usr/bin/time"


def measure(command: list[str] | str, ok_codes: tuple[int, ...] = (0, 1)) -> tuple[float, float]:
    """(wall seconds, peak RSS MB). A string command runs through the shell."""
    with tempfile.NamedTemporaryFile("r") as report:
        if isinstance(command, str):
            argv = [TIME, "-f", "%M", "-o", report.name, "sh", "-c", command]
        else:
            argv = [TIME, "-f", "%M", "-o", report.name, *command]
        start = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - start
        if proc.returncode not in ok_codes:
            raise SystemExit(
                f"{command} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}"
            )
        lines = [line for line in report.read().splitlines() if line.strip().isdigit()]
    return wall, int(lines[-1]) / 1024 if lines else float("nan")


def available() -> bool:
    return os.path.exists(TIME)
