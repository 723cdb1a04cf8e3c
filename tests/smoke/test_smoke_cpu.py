"""The default smoke in CPU mode, end to end through real Ray Tune and Ray Train."""

import pytest
from smoke_runs import assert_nothing_left

pytestmark = pytest.mark.ray_compat  # and on older Rays: `make test-ray-compat`


def test_every_stage_passes_on_the_cpu(smoke_cpu):
    assert smoke_cpu.returncode == 0, smoke_cpu.stdout
    statuses = {s["name"]: s["status"] for s in smoke_cpu.report["stages"]}
    assert statuses == dict.fromkeys(
        ("cluster", "device", "collective", "checkpoint", "port", "environment"), "pass"
    )
    assert smoke_cpu.report["findings"] == []
    assert smoke_cpu.report["summary"]["exit_code"] == 0


def test_the_collective_is_checked_on_every_rank(smoke_cpu):
    stage = smoke_cpu.stage("collective")
    ranks = stage["details"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["backend"] == "gloo" and r["ok"] and r["value"] == 3.0 for r in ranks)
    assert all(r["seconds"] > 0 for r in ranks)
    assert "allreduce of 4 MiB checked on every rank" in stage["message"]


def test_the_checkpoint_comes_back_through_a_retry(smoke_cpu):
    details = smoke_cpu.stage("checkpoint")["details"]
    assert details["save"]["ok"] and details["restore"]["ok"]
    # Tune restored it into a new attempt of the trial: another process read it back.
    assert details["save"]["written_by"]["pid"] != details["restore"]["restored_by"]["pid"]
    assert details["restore"]["files"] == ["manifest.json", "payload.bin", "tensor.pt"]


def test_device_and_environment_say_what_the_node_is(smoke_cpu):
    device = smoke_cpu.stage("device")["details"]
    assert device["matmul"][0]["device"] == "cpu" and device["matmul"][0]["ok"]
    assert device["headroom"][0]["ok"] and device["headroom"][0]["requested_bytes"] > 0
    environment = smoke_cpu.report["environment"]
    (node,) = environment["nodes"]
    assert node["cpus"] >= 1 and node["memory_total_bytes"] > 0
    assert node["ray"] == smoke_cpu.report["target"]["ray_version"]
    assert node["torch"]["version"].startswith("2.")
    assert environment["driver"]["python"]


def test_the_report_says_which_ray_api_was_used(smoke_cpu):
    api = smoke_cpu.report["environment"]["ray_api"]
    assert api["ray_version"] == smoke_cpu.report["target"]["ray_version"]
    assert api["missing"] == {} and api["train"] in ("v1", "v2")
    assert api["summary"] in smoke_cpu.stage("environment")["message"]


def test_the_port_stage_checks_torchs_default_port(smoke_cpu):
    stage = smoke_cpu.stage("port")
    assert stage["details"]["port"] == 29500
    assert "29500 (torch's default) can be bound" in stage["message"]


def test_nothing_is_left_running(smoke_cpu):
    assert smoke_cpu.stage("cluster")["details"]["started"] is True
    assert_nothing_left(smoke_cpu)
