"""cluster-unreachable: in smoke, nothing listens at --address; in inspect, a driver's or a
node's log shows it never reached the cluster's GCS (real Ray 2.60 driver log, and real
wordings of older Rays as posted)."""

import pytest
from conftest import findings_of, inspect_json

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
        ("ConnectionError: ray client connection timeout\n", "Ray Client timeout"),
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
