"""A local Ray start that misses Ray's fixed 30 s raylet registration wait (a saturated
machine) is tried again while --timeout leaves room, and only then reported."""

from __future__ import annotations

import os
import sys
import time

import pytest

from ray_doctor.smoke._model import SmokeOptions
from ray_doctor.smoke.stages import cluster
from ray_doctor.smoke.stages._common import Context

SLOW = (
    "The current node timed out during startup. This could happen because some of the raylet "
    "failed to startup or the GCS has become overloaded."
)  # Ray 2.x, ray/_private/node.py


class FakeRay:
    """Stands in for the `ray` module: each ray.init raises the next of `failures`."""

    def __init__(self, failures: list[Exception | None]) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def init(self, **options):
        self.calls.append("init")
        failure = self.failures.pop(0)
        if failure is not None:
            raise failure
        return "context"

    def shutdown(self):
        self.calls.append("shutdown")


@pytest.fixture
def fake_ray(monkeypatch):
    def install(failures):
        fake = FakeRay(failures)
        monkeypatch.setitem(sys.modules, "ray", fake)
        # The stage exports its settings into the environment for the raylet: keep them here.
        monkeypatch.setattr(os, "environ", dict(os.environ))
        return fake

    return install


def _context(seconds_left: float) -> Context:
    return Context(SmokeOptions(work_dir="/nonexistent"), time.monotonic() + seconds_left)


def test_a_start_that_missed_the_30_s_wait_is_tried_once_more(fake_ray):
    fake = fake_ray([Exception(SLOW), None])
    assert cluster._ray_init(_context(300)) == "context"
    assert fake.calls == ["init", "shutdown", "init"]  # the half-started node is stopped first


def test_the_last_allowed_miss_is_reported(fake_ray):
    fake = fake_ray([Exception(SLOW)] * cluster.START_ATTEMPTS)
    with pytest.raises(Exception, match="timed out during startup"):
        cluster._ray_init(_context(600))
    assert fake.calls.count("init") == cluster.START_ATTEMPTS
    assert fake.calls[-1] == "init"  # each miss but the last was shut down before the next


def test_no_second_start_without_time_for_it(fake_ray):
    fake = fake_ray([Exception(SLOW)])
    with pytest.raises(Exception, match="timed out during startup"):
        cluster._ray_init(_context(cluster.RETRY_START_S - 10))
    assert fake.calls == ["init"]


def test_other_start_errors_are_not_retried(fake_ray):
    fake = fake_ray([ValueError("Unknown keyword argument")])
    with pytest.raises(ValueError):
        cluster._ray_init(_context(300))
    assert fake.calls == ["init"]
