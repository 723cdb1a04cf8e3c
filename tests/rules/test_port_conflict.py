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


# Ray 2.60's monitor.log on a machine where another Ray instance already holds the autoscaler's
# fixed metrics port: Ray logs it and carries on (paths neutralised).
METRICS_SERVER_NOT_STARTED = (
    "2026-11-23 08:31:14,968\tINFO monitor.py:199 -- Starting autoscaler metrics server on port 44217\n"
    "2026-11-23 08:31:14,968\tERROR monitor.py:218 -- An exception occurred while starting the metrics server.\n"
    "Traceback (most recent call last):\n"
    '  File "/home/ray/venv/lib/python3.11/site-packages/ray/autoscaler/_private/monitor.py", line 207, in __init__\n'
    "    prometheus_client.start_http_server(\n"
    '  File "/home/ray/venv/lib/python3.11/site-packages/prometheus_client/exposition.py", line 260, in start_wsgi_server\n'
    "    httpd = make_server(addr, port, app, TmpServer, handler_class=_SilentHandler)\n"
    "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/usr/lib/python3.11/wsgiref/simple_server.py", line 154, in make_server\n'
    "    server = server_class((host, port), handler_class)\n"
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/usr/lib/python3.11/socketserver.py", line 456, in __init__\n'
    "    self.server_bind()\n"
    '  File "/usr/lib/python3.11/wsgiref/simple_server.py", line 50, in server_bind\n'
    "    HTTPServer.server_bind(self)\n"
    '  File "/usr/lib/python3.11/http/server.py", line 136, in server_bind\n'
    "    socketserver.TCPServer.server_bind(self)\n"
    '  File "/usr/lib/python3.11/socketserver.py", line 472, in server_bind\n'
    "    self.socket.bind(self.server_address)\n"
    "OSError: [Errno 98] Address already in use\n"
    "2026-11-23 08:31:14,971\tINFO monitor.py:226 -- Monitor: Started\n"
)


def _session_logs(tmp_path, **files: str) -> str:
    """A session's logs dir holding `files` (name: text)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, text in files.items():
        (logs / name.replace("_", ".")).write_text(text)
    return str(logs)


def test_near_miss_ray_carries_on_without_its_metrics_server(tmp_path):
    raylet = "[2026-11-23 08:31:12,001 I 1 1] main.cc:1 Raylet started\n"
    logs = _session_logs(tmp_path, monitor_log=METRICS_SERVER_NOT_STARTED, raylet_out=raylet)
    code, report = inspect_json(logs)
    assert not findings_of(report, "port-conflict")
    assert code == 0


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


# A raylet that cannot bind its fixed object-manager port (Ray 1.9 on a reused cloud instance,
# ray #19834): Ray's fatal check after gRPC failed to bind.
GRPC_NOT_STARTED = (
    "[2022-01-10 10:00:00,000 C 8123 8123] grpc_server.cc:102:  Check failed: server_ Failed to "
    "start the grpc server. The specified port is 8076. This means that Ray's core components "
    "will not be able to function correctly. If the server startup error message failed, try "
    "running lsof -i :8076 to check if there are other processes listening to the port.\n"
    "*** StackTrace Information ***\n"
)


def test_ray_grpc_server_that_cannot_bind_its_port(tmp_path):
    code, report = inspect_json(_session_logs(tmp_path, raylet_out=GRPC_NOT_STARTED))
    (finding,) = findings_of(report, "port-conflict")
    assert "port 8076" in finding["message"] and "gRPC server" in finding["message"]
    assert ":8076" in finding["fix"]
    assert finding["evidence"][0]["line"] == 1
    assert code == 1


def test_near_miss_grpc_server_on_any_port():
    # Port 0 asks for any free port: a failure there is not a port someone holds.
    text = GRPC_NOT_STARTED.replace("port is 8076", "port is 0")
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "port-conflict")


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [WinError 10013] An attempt was made to access a socket in a way forbidden by "
        "its access permissions",
        # the same error on a Chinese Windows: the code is what carries it
        "[ERROR ] [Server Listen] [WinError 10013] 以一种访问权限不允许的方式做了一个访问套接字的尝试。",
    ],
)
def test_windows_refusing_a_port_it_reserved_or_another_holds(line):
    _, report = inspect_json("-", stdin=line + "\n")
    (finding,) = findings_of(report, "port-conflict")
    assert "excludedportrange" in finding["fix"]


# The raylet's worker pool hands each worker a port of its range that passes a bind check
# (worker_pool.cc, GetNextFreePort); none left, the worker cannot register (ray #28071).
NO_WORKER_PORT = (
    "(raylet) [2022-08-23 15:13:15,557 E 223585 223585] core_worker.cc:137: Failed to register "
    "worker a20a041a81c6dc5a5709d7e342bd95bec33fd5b2b181fcce5a4d9221 to Raylet. Invalid: "
    "Invalid: No available ports. Please specify a wider port range using --min-worker-port "
    "and --max-worker-port.\n"
)


def test_worker_port_range_used_up():
    code, report = inspect_json("-", stdin=NO_WORKER_PORT)
    assert code == 1
    (finding,) = findings_of(report, "port-conflict")
    assert "worker port range" in finding["message"]
    assert "--max-worker-port" in finding["fix"]


def test_near_miss_worker_ports_checked_without_file_descriptors():
    """Out of file descriptors the raylet cannot open the socket its port check binds, so
    every port reads as taken: the range is not what ran out."""
    text = (
        "(raylet) [2022-08-23 15:13:15,401 E 223500 223500] Failed to open socket: "
        "Too many open files\n" + NO_WORKER_PORT
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "port-conflict")


def test_a_cpp_server_bind_failure_with_errno_98():
    """DGL's RPC server (tcp_socket.cc) logs the errno after '=' (dgl #2227, as posted)."""
    text = (
        "[20:53:08] /opt/dgl/src/rpc/network/tcp_socket.cc:69: Failed bind on "
        "10.153.44.134:30050 ,errno=98\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert findings_of(report, "port-conflict")
