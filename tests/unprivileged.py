"""Run ray-doctor as an unprivileged user, from any checkout.

Root reads every file, so a "permission denied" check must run as another user (uid 65534
via setpriv). That user also has to reach the interpreter and the code: a checkout (and its
.venv) under a directory only its owner can enter (`mktemp -d`, a 0700 home) is out of its
reach. Then the code and the venv's packages are hard-linked (no bytes copied) into a
world-searchable temp dir and run from there by the base interpreter; where even that is
impossible, the test is skipped with the cause.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
REPO = Path(__file__).resolve().parents[1]


def _reaches(python: list[str], env: dict[str, str] | None = None) -> bool:
    probe = [*SETPRIV, *python, "-c", "import ray_doctor._cli"]
    proc = subprocess.run(probe, capture_output=True, env=env, cwd="/", timeout=120)
    return proc.returncode == 0


def _blocking_dir(path: Path) -> Path | None:
    """The first directory above `path` that others may not enter."""
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & 0o001:
            return parent
    return None


@contextmanager
def as_unprivileged_user() -> Iterator[tuple[list[str], dict[str, str] | None]]:
    """(command prefix that runs `python` as uid 65534, its environment); skips with the
    cause when no such run is possible. As a non-root user, the prefix is just python."""
    if os.geteuid() != 0:
        yield [sys.executable], None
        return
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: cannot switch to an unprivileged user")
    if _reaches([sys.executable]):
        yield [*SETPRIV, sys.executable], None
        return
    base_python = os.path.realpath(sys._base_executable)
    copy = Path(tempfile.mkdtemp(prefix="rd-reachable-"))
    try:
        os.chmod(copy, 0o755)
        try:
            shutil.copytree(
                REPO / "ray_doctor", copy / "code" / "ray_doctor", copy_function=os.link
            )
            shutil.copytree(sysconfig.get_paths()["purelib"], copy / "site", copy_function=os.link)
        except OSError as exc:
            blocked = _blocking_dir(REPO)
            pytest.skip(
                f"uid {NOBODY} cannot enter {blocked} (mode 0700), which holds the checkout, "
                f"and the code could not be hard-linked elsewhere: {exc}"
            )
        env = {
            **os.environ,
            "PYTHONPATH": f"{copy / 'code'}:{copy / 'site'}",
            "PYTHONNOUSERSITE": "1",
        }
        env.pop("VIRTUAL_ENV", None)
        if not _reaches([base_python], env):
            pytest.skip(
                f"uid {NOBODY} cannot run {base_python} or read the checkout's files "
                f"(blocked at {_blocking_dir(Path(base_python)) or _blocking_dir(REPO)})"
            )
        yield [*SETPRIV, base_python], env
    finally:
        shutil.rmtree(copy, ignore_errors=True)
