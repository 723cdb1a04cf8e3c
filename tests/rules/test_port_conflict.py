"""port-conflict: torch could not listen on a port the driver held (real Ray 2.60 run)."""

import pytest
from conftest import experiment_dir, findings_of, inspect_json


def test_eaddrinuse_with_port(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_port_conflict")))
    assert code == 1
    (finding,) = findings_of(report, "port-conflict")
    assert "could not listen on port" in finding["message"]
    assert "ss -ltnp" in finding["fix"]
    healthy = [t for t in report["trials"] if t["status"] == "TERMINATED"]
    assert healthy, "the other trial was fine"


def test_near_miss_port_in_a_normal_line():
    text = "INFO: Started a local Ray instance. View the dashboard at 127.0.0.1:8265\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "port-conflict")


@pytest.mark.ray_compat
def test_smoke_finds_the_port_held_and_who_holds_it(smoke_port_and_storage):
    """`smoke --stage port --master-port P` with P held by this test process."""
    import os

    run, port = smoke_port_and_storage
    (finding,) = run.findings("port-conflict")
    assert f"Port {port} (--master-port) cannot be bound" in finding["message"]
    assert f"held by pid {os.getpid()}" in finding["message"]
    assert any("Address already in use" in e["excerpt"] for e in finding["evidence"])
    assert run.stage("port")["status"] == "fail"


@pytest.mark.ray_compat
def test_smoke_near_miss_a_free_port(smoke_cpu):
    assert not smoke_cpu.findings("port-conflict")
