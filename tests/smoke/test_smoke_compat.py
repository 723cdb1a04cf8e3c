"""Smoke on the Ray the user has: the API path per Ray version, and requests that are never
scheduled reported as the tool's own, not as the cluster's fault.

Marked ray_compat: `make test-ray-compat` runs them on an older Ray too (Ray 2.40, 2.9).
"""

import os
import subprocess
import sys

import pytest
from smoke_runs import CPUS, assert_nothing_left, run_smoke, smoke_env, start_local_ray

from ray_doctor.smoke._compat import detect, missing_ray_name
from ray_doctor.smoke._resources import NodeResources
from ray_doctor.smoke._scheduling import run_watched

pytestmark = pytest.mark.ray_compat

# The path each Ray the project tests on must take: (reporting module, Train generation).
EXPECTED_PATH = {
    "2.60.0": ("ray.tune", "v2"),
    "2.50.1": ("ray.tune", "v1"),  # Tune's own report since 2.41; Train V2 off by default
    "2.40.0": ("ray.train", "v1"),
    "2.20.0": ("ray.train", "v1"),
    "2.9.3": ("ray.train", "v1"),
}


def _installed_ray() -> str:
    from importlib.metadata import version

    return version("ray")


def test_the_api_path_is_the_one_this_ray_has():
    api = detect()
    report_module, train = EXPECTED_PATH[_installed_ray()]
    assert (api.tune_module, api.tune_config_module, api.train) == (
        report_module,
        report_module,
        train,
    )
    assert api.missing == {}
    # Train V1's trainer actor would take a CPU of its own: smoke asks for none.
    assert api.trainer_resources() == ({"CPU": 0} if train == "v1" else None)
    assert f"{report_module}.report" in api.describe()


def test_train_v1_is_followed_where_ray_turns_v2_off():
    # RAY_TRAIN_V2_ENABLED=0 is Ray's own switch back to V1 (where V2 exists): read by Ray.
    code = "from ray_doctor.smoke._compat import detect; print(detect().train)"
    env = {**os.environ, "RAY_TRAIN_V2_ENABLED": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "v1", out.stderr


@pytest.mark.parametrize(
    "text, name",
    [
        ("AttributeError: module 'ray.tune' has no attribute 'RunConfig'", "ray.tune.RunConfig"),
        (
            "ImportError: cannot import name 'Checkpoint' from 'ray.tune' (/x/ray/tune/__init__.py)",
            "ray.tune.Checkpoint",
        ),
        # near misses: a user's module, an attribute of an object
        ("AttributeError: module 'mylib' has no attribute 'train'", None),
        ("AttributeError: 'NoneType' object has no attribute 'report'", None),
        ("ModuleNotFoundError: No module named 'ray_doctor'", None),
    ],
)
def test_a_ray_name_this_ray_lacks_is_told_from_other_errors(text, name):
    assert missing_ray_name(text) == name


def _ray_nodes() -> list[NodeResources]:
    import ray

    return [
        NodeResources(n["NodeID"], "127.0.0.1", "local", dict(n["Resources"]))
        for n in ray.nodes()
        if n["Alive"]
    ]


@pytest.fixture(scope="module")
def local_ray():
    import tempfile

    import ray

    temp_dir = tempfile.mkdtemp(prefix="rdtest-", dir="/tmp")  # Ray's sockets need a short path
    start_local_ray(temp_dir, logging_level="ERROR")
    try:
        yield _ray_nodes()
    finally:
        ray.shutdown()


def test_a_placement_group_no_node_can_hold_is_given_up_at_once(local_ray):
    from ray.util.placement_group import placement_group, remove_placement_group

    asked = [{"CPU": 1.0}] * 3
    group = placement_group(asked)
    # A budget far above the test's run: the watch must end it because the group can never
    # be placed, not because time ran out (that would say infeasible=False).
    try:
        watched = run_watched(lambda: group.wait(60), 600, asked, local_ray, wait_s=600)
    finally:
        remove_placement_group(group)
    assert not watched.finished
    assert watched.unscheduled is not None and watched.unscheduled.infeasible
    assert watched.unscheduled.bundles == asked


def test_waiting_behind_smokes_own_work_is_not_a_shortage(monkeypatch):
    # Ray's table as a script, time as a counter: the rule is checked, not a machine's speed.
    from ray_doctor.smoke import _scheduling
    from ray_doctor.smoke._scheduling import Group, Watch

    asked = [{"CPU": 1.0}, {"CPU": 1.0}]
    ours = Group("aa01", [{"CPU": 2.0}], "CREATED", False)  # the other stage, running
    waiting = Group("bb01", asked, "PENDING", False)
    table: list[Group] = []
    now = [0.0]
    monkeypatch.setattr(_scheduling, "own_groups", lambda nodes: table)
    monkeypatch.setattr(_scheduling.time, "monotonic", lambda: now[0])
    watch = Watch(asked, [], wait_s=30)

    table[:] = [ours, waiting]
    for now[0] in (0.0, 100.0, 1000.0):  # queued behind our own run, however long
        assert watch.poll() is None
    table[:] = [waiting]  # ours ended; nothing of ours holds resources, still pending
    for now[0] in (1001.0, 1030.0):
        assert watch.poll() is None
    now[0] = 1031.0
    unscheduled = watch.poll()
    assert unscheduled is not None and not unscheduled.infeasible
    assert unscheduled.bundles == asked and unscheduled.seconds == 30.0


def test_too_many_workers_for_the_cluster(smoke_too_many_workers):
    run = smoke_too_many_workers
    assert run.returncode == 1
    (finding,) = run.findings("resources-insufficient")
    assert f"{CPUS + 2} Train workers x 1 CPU" in finding["message"]
    assert f"the cluster has {CPUS} CPUs ({CPUS + 2} needed)" in finding["message"]
    assert not run.findings("collective-timeout"), "never blamed on the network"
    later = {s["name"]: s["status"] for s in run.report["stages"][1:]}
    assert set(later.values()) == {"skip"}, "nothing waits on a request that cannot fit"
    assert_nothing_left(run)


# A Ray without the function-trainable API smoke's Tune stages use (as on a Ray older than
# 2.7): `report` is taken out of ray.tune and ray.train as each is imported, in every process.
_WITHOUT_REPORT = """
import importlib.abc, importlib.util, sys

class _Strip(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("ray.tune", "ray.train"):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.__dict__.pop("report", None)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Strip())
"""


def test_a_ray_without_the_api_is_a_limitation_of_the_tool_not_a_finding(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_WITHOUT_REPORT)
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH")) if p)
    run = run_smoke(
        tmp_path / "run",
        "--stage",
        "device",
        "--stage",
        "checkpoint",
        env=smoke_env(tmp_path, PYTHONPATH=path),
    )
    assert run.returncode == 2, run.stderr
    assert run.report["findings"] == [], "nothing is said about the cluster"
    device, checkpoint = run.stage("device"), run.stage("checkpoint")
    assert device["status"] == checkpoint["status"] == "error"
    assert "limitation of ray-doctor" in device["message"]
    assert "ray.train.report" in device["message"]
    assert device["details"]["missing_api"] == "tune"
    assert run.report["environment"]["ray_api"]["missing"].keys() == {"tune"}
    assert_nothing_left(run)


def test_a_name_ray_refuses_is_reported_as_the_tools_limitation(tmp_path):
    from ray_doctor.smoke._runner import Events, timed

    def stage():  # what Ray 2.40 said to the smoke of ray-doctor 0.1
        raise AttributeError("module 'ray.tune' has no attribute 'RunConfig'")

    result = timed(Events(tmp_path / "events.jsonl"), "device", stage)
    assert result.status.value == "error"
    assert "has no ray.tune.RunConfig" in result.message
    assert "limitation of ray-doctor" in result.message
    assert result.details["missing_api"] == "ray.tune.RunConfig"


def test_a_restore_still_running_at_the_deadline_is_out_of_time(local_ray, monkeypatch):
    """Seen on a loaded machine: the checkpoint stage's restore task outlived the last second
    of --timeout and Ray's GetTimeoutError was reported as a checkpoint that came back wrong
    (checkpoint-roundtrip, exit 1). The restore here is a real Ray task that takes too long."""
    import time

    from ray_doctor.smoke import SmokeOptions, _probes
    from ray_doctor.smoke.stages._common import Context
    from ray_doctor.smoke.stages.checkpoint import restore_checkpoint

    monkeypatch.setattr(_probes, "restore_checkpoint", lambda checkpoint: time.sleep(30))
    ctx = Context(SmokeOptions(), deadline=time.monotonic(), storage="/tmp/unused")
    restored = restore_checkpoint(ctx, checkpoint=None)
    assert restored["timed_out"] and not restored["ok"]
    assert "GetTimeoutError" in restored["error"]
