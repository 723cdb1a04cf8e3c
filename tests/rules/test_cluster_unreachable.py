"""cluster-unreachable: in smoke, nothing listens at --address; in inspect, a driver's or a
node's log shows it never reached the cluster's GCS (real Ray 2.60 driver log, and real
wordings of older Rays as posted)."""

import pytest
from conftest import corpus_excerpt, findings_of, inspect_json

UNREACHABLE_LOG = "tune_cluster_unreachable/driver.log"


def test_connection_refused_is_named(smoke_unreachable):
    (finding,) = smoke_unreachable.findings("cluster-unreachable")
    assert finding["severity"] == "error"
    assert "nothing answers at 127.0.0.1:" in finding["message"]
    assert finding["evidence"][0]["excerpt"].startswith("TCP connect to 127.0.0.1:")
    assert "ray status" in finding["fix"]


def test_near_miss_a_local_instance_that_starts(smoke_cpu):
    assert not smoke_cpu.findings("cluster-unreachable")


def test_the_rule_page_example_is_what_smoke_says(smoke_unreachable):
    from smoke_runs import assert_matches_doc_example

    assert_matches_doc_example("cluster-unreachable", smoke_unreachable)


def test_inspect_names_the_address_nothing_answers_at(fixtures):
    """A Tune driver whose ray.init(address=...) found no head: Ray retries the GCS for good,
    the log is all that is left."""
    code, report = inspect_json(str(fixtures / UNREACHABLE_LOG))
    assert code == 1
    (finding,) = findings_of(report, "cluster-unreachable")
    assert "head at 192.0.2.2:" in finding["message"]
    assert "Failed to connect to GCS at address" in finding["evidence"][0]["excerpt"]
    assert "nc -zv" in finding["fix"] and "ray://" in finding["fix"]


@pytest.mark.parametrize(
    "after",
    [
        # the driver gave up on the address and started its own instance (real Ray 2.60 line)
        "2026-11-22 06:31:42,941\tINFO worker.py:2038 -- Started a local Ray instance.\n",
        # the GCS came up and refused the driver's token (real Ray 2.60 lines, head started
        # after the driver)
        "[2026-11-25 22:37:16,402 W 22462 22462] gcs_client.cc:210: Failed to get cluster ID "
        "from GCS server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token "
        "is missing or incorrect\n",
    ],
    ids=["connected-later", "token-refused"],
)
def test_near_miss_the_gcs_answered_later(fixtures, tmp_path, after):
    log = tmp_path / "driver.log"
    log.write_text((fixtures / UNREACHABLE_LOG).read_text() + after)
    _, report = inspect_json(str(log))
    assert not findings_of(report, "cluster-unreachable")


@pytest.mark.parametrize(
    "text, said",
    [
        (  # Ray 2.x, address="auto" with no cluster on the machine
            "ConnectionError: Could not find any running Ray instance. Please specify the one "
            "to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.\n",
            "found no running Ray cluster",
        ),
        (  # Ray 1.x, ray start on a worker node (ray #18707, as posted)
            "RuntimeError: Unable to connect to Redis at 10.0.199.179:6379 after 16 retries. "
            "Check that 10.0.199.179:6379 is reachable from this machine. If it is not, your "
            "firewall may be blocking this port.\n",
            "head at 10.0.199.179:6379",
        ),
        (  # a laptop through kubectl port-forward (ray #29893, as posted)
            'RuntimeError: b"This node has an IP address of 127.0.0.1, and Ray expects this IP '
            "address to be either the GCS address or one of the Raylet addresses. Connected to "
            "GCS at 127.0.0.1 and found raylets at 10.244.1.3, 10.244.2.4 but none of these "
            "match this node's IP 127.0.0.1.\"\n",
            "not on the cluster's network",
        ),
        (  # ray start --address=$MASTER_ADDR:6379 with the variable unset (MM-EUREKA #54)
            "[2025-07-23 10:05:49,679 W 51000 51000] gcs_rpc_client.h:151: Failed to connect to "
            "GCS at address :6379 within 5 seconds.\n",
            "no host",
        ),
        (
            "ConnectionError: ray client connection timeout\n",
            "could not connect through Ray Client",
        ),
        (  # `ray job submit` given the dashboard's port through a port-forward (kuberay #906)
            "WARNING utils.py:1415 -- Unable to connect to GCS at 10.160.66.135:8265. Check "
            "that (1) Ray GCS with matching version started successfully at the specified "
            "address, and (2) there is no firewall setting preventing access.\n",
            "port 8265 is the dashboard's",
        ),
        (  # a driver on a machine that never joined the cluster (vllm #14349)
            "2025-03-19 14:59:50,134\tINFO node.py:1084 -- Can't find a `node_ip_address.json` "
            "file from /tmp/ray/session_2025-03-19_14-26-07_915096_1. Have you started Ray "
            "instance using `ray start` or `ray.init`?\n",
            "not on a node of the cluster",
        ),
    ],
    ids=[
        "no-instance",
        "redis-1x",
        "ip-mismatch",
        "empty-host",
        "ray-client",
        "gcs-version-or-port",
        "not-a-node",
    ],
)
def test_wordings_across_versions(text, said):
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "cluster-unreachable")
    assert said in finding["message"]


def test_near_miss_gcs_killed_mid_run():
    """ "Failed to connect to GCS within 60 seconds" is a raylet or worker losing a GCS it had:
    the head died (vllm #1465, ray #34334); why it died is the question, not the address."""
    text = (
        "[2023-04-12 11:23:25,823 E 946 946] (raylet) gcs_rpc_client.h:533: Failed to connect "
        "to GCS within 60 seconds. GCS may have been killed. It's either GCS is terminated by "
        "`ray stop` or is killed unexpectedly.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "cluster-unreachable")


@pytest.mark.parametrize(
    "text, said",
    [
        (
            "[2021-04-18 06:54:54,934 C 756 756] service_based_gcs_client.cc:229: Couldn't "
            "reconnect to GCS server. The last attempted GCS server address was 10.42.0.44:43507\n",
            "10.42.0.44:43507",
        ),
        (
            "F1119 08:22:23.602082 1513663 1513663 redis_context.cc:298] Could not establish "
            "connection to redis 10.0.0.5:12662 (context.err = 1)\n",
            "10.0.0.5:12662",
        ),
        (
            "2022-02-05 16:39:15,662 ERROR gcs_utils.py:137 -- Failed to send request to gcs, "
            "reconnecting. Error <_InactiveRpcError of RPC that terminated with:\n",
            "GCS request retried",
        ),
        (
            "Traceback (most recent call last):\n"
            '  File "/site-packages/ray/_private/node.py", line 730, in _init_gcs_client\n'
            "    raise RuntimeError(\n"
            "RuntimeError: Failed to connect to GCS.\n",
            "GCS connect failed",
        ),
        (  # a worker node's `ray start --address` (ray #51917)
            "[2025-04-02 10:08:39,826 C 533 533] global_state_accessor.cc:296: Failed to get "
            "system config within the timeout setting.\n",
            "system config not received",
        ),
        (  # Ray 1.x's driver on a machine that had not joined the cluster (ray #21591)
            "[2022-02-02 22:24:43,102 C 32987 33002] core_worker.cc:251: Failed to get the "
            "system config from Raylet on time unexpectedly.IOError: \n",
            "system config not received",
        ),
    ],
    ids=[
        "gcs-reconnect-1x",
        "redis-context",
        "gcs-request-1.9",
        "node-py-bare",
        "system-config-2x",
        "system-config-1x",
    ],
)
def test_ray_1x_and_2x_wordings(text, said):
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "cluster-unreachable")
    assert said in finding["message"]


def _redis_refused_under(frame: str) -> str:
    """redis-py's refused connect, called from `frame` (a file and its line of code)."""
    return (
        "Traceback (most recent call last):\n"
        f"{frame}"
        '  File "/site-packages/redis/connection.py", line 559, in connect\n'
        "    sock = self._connect()\n"
        '  File "/site-packages/redis/connection.py", line 603, in _connect\n'
        "    sock.connect(socket_address)\n"
        "ConnectionRefusedError: [Errno 111] Connection refused\n"
    )


def test_redis_refused_under_rays_own_start_up_is_the_cluster():
    # Ray < 2 reached the head's Redis with redis-py (ray #15780).
    text = _redis_refused_under(
        '  File "/site-packages/ray/node.py", line 502, in get_gcs_client\n'
        "    self._gcs_client = GcsClient(address=self.gcs_address)\n"
    )
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "cluster-unreachable")
    assert "ConnectionRefusedError" in finding["message"]


def test_near_miss_a_users_own_redis():
    text = _redis_refused_under(
        '  File "/home/me/train.py", line 12, in train_fn\n    cache.get(key)\n'
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "cluster-unreachable")


def test_near_miss_the_gcs_request_retried_at_debug_level():
    # From Ray 1.11 every start-up may log it while the local GCS comes up (ray #43070).
    text = (
        "2024-02-09 10:27:03,695\tDEBUG gcs_utils.py:206 -- Failed to send request to gcs, "
        "reconnecting. Error <_InactiveRpcError of RPC that terminated with:\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "cluster-unreachable")


def test_the_job_server_unreachable_gets_no_gcs_port_hint():
    # `ray job submit` / a KubeRay RayJob submitter: 8265 is the right port here (kuberay #1381).
    text = (
        "ConnectionError: Failed to connect to Ray at address: "
        "http://rayjob-sample-raycluster-head-svc.default.svc.cluster.local:8265.\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "cluster-unreachable")
    assert "job server" in finding["message"]
    assert "6379" not in finding["message"]
    assert "8265" in finding["fix"]


def test_ray_client_given_the_gcs_port_is_told_the_client_port():
    # ray #46733 as posted: ray.init("ray://HOST:6379") and the client's timeout warning.
    code, report = inspect_json(
        "-", stdin=corpus_excerpt("ray/46733-ray-client-connection-timeout.txt")
    )
    assert code == 1
    (finding,) = findings_of(report, "cluster-unreachable")
    assert "port 6379, the GCS's" in finding["message"]
    assert 'ray.init("ray://HEAD:10001")' in finding["fix"]


def test_a_head_whose_gcs_never_started_points_at_its_logs():
    # LLaMA-Factory #3823 as posted: Ray 2.x's node start-up gave up on its own GCS.
    text = corpus_excerpt("llamafactory/3823-vllm-auto-ray-failed-to-start-gcs.txt")
    _, report = inspect_json("-", stdin=text)
    (finding,) = findings_of(report, "cluster-unreachable")
    assert "could not start a local Ray cluster" in finding["message"]
    assert "gcs_server.out" in finding["fix"]


PORT_FORWARD = (
    "Forwarding from 127.0.0.1:{port} -> {port}\n"
    "Handling connection for {port}\n"
    "E0317 22:21:58.501309  135973 portforward.go:406] an error occurred forwarding {port} -> "
    "{port}: error forwarding port {port} to pod 755dce9c4626, uid : failed to execute "
    'portforward in network namespace "/var/run/netns/cni-76ec8b4c": failed to dial {port}: '
    "dial tcp4 127.0.0.1:{port}: connect: connection refused\n"
    "E0317 22:21:58.501671  135973 portforward.go:234] lost connection to pod\n"
)


def test_a_port_forward_to_a_head_pod_that_does_not_listen():
    """ray #25909: KubeRay's head pod runs, its dashboard does not answer on 8265."""
    code, report = inspect_json("-", stdin=PORT_FORWARD.format(port=8265))
    assert code == 1
    (finding,) = findings_of(report, "cluster-unreachable")
    assert "nothing listened on port 8265" in finding["message"]
    assert "dashboard" in finding["message"] and "kubectl logs" in finding["fix"]


def test_near_miss_a_port_forward_to_a_port_that_is_not_rays():
    _, report = inspect_json("-", stdin=PORT_FORWARD.format(port=8080))
    assert not findings_of(report, "cluster-unreachable")


def test_near_miss_a_gcs_out_of_file_descriptors():
    """ray #34486: the GCS could not accept connections (its fd limit), so every raylet timed
    out connecting to it. The limit is the cause, not an unreachable head."""
    text = (
        "(pid=gcs_server) E0412 18:43:30.090938599     302 tcp_server_posix.cc:216]    Failed "
        "accept4: Too many open files\n"
        "(raylet) [2023-04-12 18:43:36,237 E 55835 55835] gcs_rpc_client.h:203: Failed to "
        "connect to GCS at address 10.0.34.93:6379 within 5 seconds.\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "cluster-unreachable")
    _, report = inspect_json("-", stdin=text.split("\n", 1)[1])
    assert findings_of(report, "cluster-unreachable")
