"""cluster-unreachable: the Ray cluster could not be joined (inspect) or started (smoke)."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Evidence, Experiment, Failure, Frame
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import (
    Hit,
    Signature,
    SignatureRule,
    mentions,
    signatures,
    texts_of,
    wording,
)
from ray_doctor.rules.storage_unreachable import OUT_OF_FDS

JOB_SERVER = "job server unreachable"
GCS_GAVE_UP = "GCS did not come up"
PORT_FORWARD = "port-forward refused in the head pod"
# Ray's head ports by what listens on them (Ray 1.x-2.60 defaults).
HEAD_PORTS = {"8265": "dashboard and job server", "10001": "Ray Client server", "6379": "GCS"}
GCS_CLIENT = "Ray's GCS client (src/ray/rpc/gcs/gcs_rpc_client.h, rpc_client.h)"
UNREACHABLE = signatures(
    wording(
        "no running instance",
        r"Could not find any running Ray instance",
        "ray.init / ray CLI resolving the address (python/ray/_private/services.py)",
        "Ray 1.x-2.60",
        "ConnectionError: Could not find any running Ray instance. Please specify the one to "
        "connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.",
    ),
    wording(
        "GCS not answering",
        r"Failed to connect to GCS at address (\S+?)\.? within \d+ seconds",
        GCS_CLIENT,
        "Ray 2.x-2.60",
        "[2026-11-25 22:33:34,922 W 19071 19071] rpc_client.h:153: Failed to connect to GCS at "
        "address 192.0.2.2:49599 within 5 seconds.",
    ),
    wording(
        "GCS unreachable",
        r"Unable to connect to GCS at (\S+?)\.? Check that",
        "ray.init / ray start reading from the GCS (python/ray/_private/utils.py, "
        "internal_kv_get_with_retry)",
        "Ray 1.x-2.60",
        "WARNING utils.py:1414 -- Unable to connect to GCS at 172.17.0.2:6379. Check that (1) Ray "
        "GCS with matching version started successfully at the specified address, and (2) "
        "there is no firewall setting preventing access.",
    ),
    wording(
        "GCS unreachable",
        # What follows the "Unable to connect to GCS" retries, and Ray's other readers of the
        # GCS giving up (state API, dashboard, Ray 1.13's GCS client).
        r"Could not (?:read|list) '[^']*' from GCS\. Did GCS start successfully\?|"
        r"Failed to connect to Ray cluster at \S|"
        r"Failed to connect to GCS\. Please check if the GCS server is running|"
        r"Couldn't obtain the API server address from GCS|"
        r"ERROR gcs_utils\.py:\d+ -- Connecting to gcs failed",
        "ray.init / ray start (python/ray/_private/utils.py internal_kv_get_with_retry, "
        "worker.py), the state API (_private/state.py), the dashboard's client (dashboard/"
        "utils.py), Ray 1.13's gcs_utils.py",
        "Ray 1.13-2.60",
        "ConnectionError: Could not read 'session_name' from GCS. Did GCS start successfully?",
    ),
    wording(
        "GCS connect failed",
        # Ray 2.x's Node._init_gcs_client raises the bare sentence after its retries.
        r"Failed to connect to GCS\. Please check `?gcs_server\.out|"
        r"RuntimeError: Failed to connect to GCS\.\s*$",
        "Ray's Python GCS client (python/ray/_private/gcs_utils.py; python/ray/_private/node.py)",
        "Ray 2.0-2.x",
        "ERROR gcs_utils.py:213 -- Failed to connect to GCS. Please check `gcs_server.out` for "
        "more details.",
    ),
    wording(
        "not a node",
        r"Can't find a `node_ip_address\.json` file",
        "ray.init on a machine with no Ray node of the cluster (python/ray/_private/node.py)",
        "Ray 2.x-2.60",
        "ValueError: Can't find a `node_ip_address.json` file from /tmp/ray/session_... for 60 "
        "seconds. A ray instance hasn't started. Did you do `ray start` or `ray.init` on this "
        "host?",
    ),
    wording(
        "cluster ID timeout",
        r"Failed to get cluster ID from GCS server: TimedOut",
        "Ray's GCS client (src/ray/gcs/gcs_client/gcs_client.cc)",
        "Ray 2.5-2.60",
        "gcs_client.cc:210: Failed to get cluster ID from GCS server: TimedOut: Timed out while "
        "waiting for GCS to become available.",
    ),
    wording(
        "Redis unreachable",
        r"Unable to connect to Redis at (\S+?) after \d+ retries",
        "ray start / ray.init waiting for the head's Redis (python/ray/_private/services.py)",
        "Ray 0.8-1.x",
        "RuntimeError: Unable to connect to Redis at 10.0.199.179:6379 after 16 retries. Check "
        "that 10.0.199.179:6379 is reachable from this machine.",
    ),
    wording(
        "Redis unreachable (0.x)",
        r"Unable to connect to Redis\. If the Redis instance is on a different machine",
        "ray start / ray.init waiting for the head's Redis (ray/services.py, "
        "wait_for_redis_to_start, after its retries)",
        "Ray 0.6-0.8",
        "Exception: Unable to connect to Redis. If the Redis instance is on a different machine, "
        "check that your firewall is configured properly.",
    ),
    wording(
        "node processes not registered",
        r"Some processes that the driver needs to connect to have not registered with Redis",
        "ray.init joining a node's processes through Redis (ray/worker.py, "
        "get_address_info_from_redis, retried every second)",
        "Ray 0.6",
        "WARNING worker.py:1249 -- Some processes that the driver needs to connect to have not "
        "registered with Redis, so retrying. Have you run 'ray start' on this node?",
    ),
    wording(
        GCS_GAVE_UP,
        r"Failed to (?:start|connect to) GCS\.\s+Last \d+ lines of error files",
        "Ray's node start-up giving up on its GCS (python/ray/_private/node.py, "
        "_init_gcs_client): a head's own GCS that exited or never answered",
        "Ray 2.0-2.60",
        "RuntimeError: Failed to start GCS.  Last 0 lines of error files:",
    ),
    wording(
        "Ray Client timed out",
        r"Ray Client connection timed out\. Ensure that the Ray Client port",
        "Ray Client (python/ray/util/client/worker.py), the warning before its ConnectionError",
        "Ray 1.x-2.60",
        "UserWarning: Ray Client connection timed out. Ensure that the Ray Client port on the "
        "head node is reachable from your local machine.",
    ),
    wording(
        JOB_SERVER,
        r"Failed to connect to Ray at address: (\S+?)\.?$",
        "Ray's job submission SDK reaching the head's dashboard (python/ray/dashboard/modules/"
        "dashboard_sdk.py): `ray job submit`, JobSubmissionClient, KubeRay's RayJob submitter",
        "Ray 1.9-2.60",
        "ConnectionError: Failed to connect to Ray at address: http://raycluster-head-svc:8265.",
    ),
    wording(
        "GCS reconnect gave up",
        r"Couldn't reconnect to GCS server\. The last attempted GCS server address was (\S+)",
        "Ray 1.x's GCS client giving up (src/ray/gcs/gcs_client/service_based_gcs_client.cc, "
        "RAY_LOG(FATAL))",
        "Ray 1.0-1.x",
        "service_based_gcs_client.cc:229: Couldn't reconnect to GCS server. The last attempted GCS "
        "server address was 10.42.0.44:43507",
    ),
    wording(
        "GCS request retried",
        # At ERROR only: from Ray 1.11 it is a debug line every start-up may print while the
        # local GCS comes up (ray #43070).
        r"ERROR [\w.]+:\d+ -- Failed to send request to gcs, reconnecting",
        "Ray's Python GCS client retrying on UNAVAILABLE (python/ray/_private/gcs_utils.py; "
        "logged as an error in Ray 1.9-1.10, as debug after)",
        "Ray 1.9-2.x",
        "ERROR gcs_utils.py:137 -- Failed to send request to gcs, reconnecting. Error "
        "<_InactiveRpcError of RPC that terminated with:",
    ),
    wording(
        "Redis connect failed",
        # The host as printed, or as a poster masked it ("redis head ip:39902").
        r"Could not establish connection to [Rr]edis (\S+(?: \S+){0,2}:\d+) \(context\.err = \d+\)",
        "Ray's Redis client, a raylet or GCS reaching the head's Redis (src/ray/gcs/"
        "redis_context.cc: RAY_LOG(FATAL) in 0.8-1.x, a RedisError after)",
        "Ray 0.8-2.60",
        "F1119 08:22:23.602082 1513663 1513663 redis_context.cc:298] Could not establish "
        "connection to redis 10.0.0.5:12662 (context.err = 1)",
    ),
    wording(
        "node IP not in cluster",
        r"This node has an IP address of (\S+), and Ray expects this IP address to be either "
        r"the GCS address or one of the Raylet addresses",
        "Ray core worker joining as a driver (src/ray/gcs/gcs_client/global_state_accessor.cc)",
        "Ray 1.x-2.60",
        "RuntimeError: This node has an IP address of 127.0.0.1, and Ray expects this IP "
        "address to be either the GCS address or one of the Raylet addresses.",
    ),
    # A process joining the cluster (a driver's core worker, `ray start --address`) asks for
    # the cluster's system config first and dies when no answer comes (RAY_LOG(FATAL)).
    wording(
        "system config not received",
        r"Failed to get (?:the )?system config (?:from Raylet on time|within the timeout)",
        "Ray core worker / node start-up asking for the cluster's config (src/ray/core_worker/"
        "core_worker.cc in 1.x, from the raylet; src/ray/gcs/gcs_client/"
        "global_state_accessor.cc from 2.x, from the GCS)",
        "Ray 1.x-2.60",
        "[2025-04-02 10:08:39,826 C 533 533] global_state_accessor.cc:296: Failed to get system "
        "config within the timeout setting.",
    ),
    # KubeRay users reach the head through `kubectl port-forward`: kubelet dials the port inside
    # the head pod, and a refusal there means the pod runs but nothing of Ray listens on it
    # (ray #25909: the dashboard's 8265).
    wording(
        PORT_FORWARD,
        r"error forwarding port (8265|10001|6379) to pod [^\n]*connect: connection refused",
        "kubectl port-forward (client-go tools/portforward, the kubelet dialing inside the pod)",
        "Kubernetes 1.x",
        "E0317 22:21:58.501309  135973 portforward.go:406] an error occurred forwarding 8265 -> "
        "8265: error forwarding port 8265 to pod 755dce9c4626, uid : failed to execute "
        'portforward in network namespace "/var/run/netns/cni-76ec8b4c": failed to dial '
        "8265: dial tcp4 127.0.0.1:8265: connect: connection refused",
    ),
    wording(
        "Ray Client timeout",
        r"ray client connection timeout",
        "Ray Client (python/ray/util/client/worker.py)",
        "Ray 1.x-2.60",
        "ConnectionError: ray client connection timeout",
    ),
)
# Lines Ray logs while it keeps retrying (the GCS client's timeouts, the driver waiting for a
# local node): they say the cluster could not be reached only when nothing in the text shows
# that the GCS answered later: a connection that worked, or a GCS that refused the driver's
# token (Ray 2.5x's token auth: "Unauthenticated", "InvalidAuthToken"), which is reachable and
# wants credentials.
RETRIED = frozenset(
    {
        "GCS not answering",
        "cluster ID timeout",
        "GCS unreachable",
        "GCS connect failed",
        "GCS request retried",
        "not a node",
        "node processes not registered",
    }
)
ANSWERED = signatures(
    (
        "connected",
        r"Connected to Ray cluster|Started a local Ray instance|Ray runtime started",
    ),
    ("token refused", r"InvalidAuthToken|AuthenticationError|from GCS server: Unauthenticated"),
)


# Ray before 2.0 reached the head's Redis with redis-py: a connection error raised in redis-py
# under Ray's own frames (ray.init, ray start, a raylet joining) is the cluster not answering.
# A user's own Redis fails under the user's frames, not Ray's.
REDIS_FRAMES = Signature(
    "Redis connect failed under Ray",
    re.compile(r".*"),
    "redis-py's connection (redis/connection.py) called by Ray's node start-up (ray/node.py, "
    "ray/_private/services.py)",
    "Ray 0.8-1.x",
)
CONNECT_ERRORS = {
    "ConnectionRefusedError",
    "TimeoutError",
    "ConnectionError",
    "redis.exceptions.ConnectionError",
    "redis.exceptions.TimeoutError",
}


def _in_redis_py(frame: Frame) -> bool:
    return frame.file.replace("\\", "/").endswith("redis/connection.py")


def _in_ray(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    return "/ray/" in path and "/redis/" not in path


# Ray Client's own words for a connection that never came up, and the address it was given.
RAY_CLIENT = frozenset({"Ray Client timed out", "Ray Client timeout"})
CLIENT_ADDRESS = re.compile(r"ray://([\w.\-]+):(\d+)")
CLIENT_PORT = "10001"


def _ray_client(experiment: Experiment, hit: Hit, who: str) -> tuple[str, str]:
    texts = texts_of(experiment, hit.failure)
    address = next((m for text in texts if (m := CLIENT_ADDRESS.search(text))), None)
    message = f"{who} could not connect through Ray Client: the connection timed out"
    if address is not None and address.group(2) != CLIENT_PORT:
        port = address.group(2)
        gcs = ", the GCS's" if port == "6379" else ""
        message += (
            f"; it was given ray://{address.group(1)}:{port}, port {port}{gcs}: the Ray Client "
            f"server listens on {CLIENT_PORT} unless `--ray-client-server-port` said otherwise"
        )
    fix = (
        'Connect to the head\'s Ray Client server: `ray.init("ray://HEAD:10001")` (the port '
        "`ray start --head` gives it); check this machine reaches it (`nc -zv HEAD 10001`, "
        "firewalls, a Kubernetes Service that exposes 10001), and use the cluster's Ray and "
        "Python versions."
    )
    return message + ".", fix


# What was not there, by wording ("nothing answered there" unless said otherwise).
ANSWER = {"GCS unreachable": "no GCS of this Ray version answered there"}
# Ray's other default ports, often given where the GCS port belongs.
OTHER_PORTS = {
    "8265": "the dashboard's (for `ray job submit --address http://HEAD:8265`)",
    "10001": 'the Ray Client server\'s (for `ray.init("ray://HEAD:10001")`)',
}


def _port_hint(address: str) -> str:
    host, _, port = address.rpartition(":")
    if not host:
        # `--address=$HEAD:6379` with the variable unset.
        return "; the address has no host (was the variable meant to hold the head's IP empty?)."
    if port in OTHER_PORTS:
        return f"; port {port} is {OTHER_PORTS[port]}, the GCS listens on 6379 by default."
    return "."


class ClusterUnreachable(SignatureRule):
    """The driver or a node could not reach the Ray cluster's head (its GCS); in `smoke`, the
    cluster at `--address` could not be joined or a local one could not start.

    Symptom:
        `ray.init(address=...)` or `ray start --address=...` never connects: "Failed to
        connect to GCS at address ... within 5 seconds" and "Failed to get cluster ID from GCS
        server: TimedOut" over and over, "Unable to connect to GCS at ...",
        "ConnectionError: Could not find any running Ray instance", Ray 1.x's "Unable to
        connect to Redis at ...", "ray client connection timeout", "Can't find a
        `node_ip_address.json` file", or "This node has an IP address of ..., and Ray expects
        this IP address to be either the GCS address or one of the Raylet addresses"; a
        joining process that never got the cluster's config ("Failed to get system config
        within the timeout setting", 1.x: "... from Raylet on time"); Ray 0.x's "Unable to connect to Redis. If the Redis instance is on a different machine …";
        a head whose own GCS never came up ("Failed to start GCS. Last N lines of error
        files"). In `smoke`: nothing answers at `--address`, something that is not a Ray GCS
        does, or `ray.init` fails.
    Likely cause:
        Nothing listens at the address: the head node is down, restarting or not started
        yet, or the host or port is wrong (the GCS port is 6379 unless `ray start --port`
        said otherwise; `address="auto"` finds only a cluster started on the same machine).
        A firewall or security group between this machine and the head. A driver outside the
        cluster's network (a laptop through a port-forward) reaches the GCS but not the
        nodes, which Ray refuses. A driver whose Ray or Python version differs from the
        cluster's.
    Evidence it uses:
        In `inspect`: Ray's connection errors in the driver's log or a node's log. The
        warnings Ray logs while it retries count only when nothing in the text shows a
        connection that worked ("Connected to Ray cluster", "Started a local Ray instance",
        "Ray runtime started") or a GCS that answered by refusing the driver's auth token: a
        head that comes up a little late is no failure, and one that wants a token is
        reachable. In `smoke`: the TCP connection attempt made before `ray.init`, and the
        error `ray.init` raised.
    Fix:
        Check the head node is up (`ray status` on it) and which address `ray start --head`
        printed; from this machine, `nc -zv HOST PORT`, and open that port between the nodes.
        From outside the cluster's network use Ray Client, `ray.init("ray://HEAD:10001")`, or
        submit the script with `ray job submit`. Use the same Ray and Python versions as the
        cluster.
    References:
        - https://docs.ray.io/en/latest/ray-core/starting-ray.html
        - https://docs.ray.io/en/latest/cluster/running-applications/job-submission/ray-client.html
        - https://docs.ray.io/en/latest/ray-core/configure.html#ports-configurations
    """

    id = "cluster-unreachable"
    title = "Could not join or start the Ray cluster"
    severity = Severity.ERROR
    # Below the causes a head node dies of (memory, disk): a cluster that went away is often
    # their echo. Above an error reported as it stands.
    specificity = Precedence.TRANSPORT
    commands = ("inspect", "smoke")
    example = "fixtures/tune_cluster_unreachable"
    smoke_example = "ray-doctor smoke --address 127.0.0.1:1"
    signatures = UNREACHABLE

    def search_failure(self, failure: Failure) -> Hit | None:
        hit = super().search_failure(failure)
        if hit is not None or failure.exc_type not in CONNECT_ERRORS:
            return hit
        frames = failure.frames
        if not (any(map(_in_redis_py, frames)) and any(map(_in_ray, frames))):
            return None
        where = f"Ray's connection to the head's Redis raised {failure.exc_type}"
        line = failure.exc_line or Evidence(frames[-1].file, frames[-1].line, where)
        match = REDIS_FRAMES.pattern.match(where)
        return Hit(REDIS_FRAMES, match, line, failure) if match else None

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        hit = self.search_failure(failure) if failure is not None else None
        retried_only = hit is None or hit.signature.label in RETRIED
        if retried_only and mentions(experiment, failure, ANSWERED):
            return True
        # A process out of file descriptors can neither accept nor open a connection: a GCS
        # logging "Failed accept4: Too many open files" looks unreachable to every raylet
        # (ray #34486). The limit is the cause, as for port-conflict and storage-unreachable.
        return mentions(experiment, failure, OUT_OF_FDS)

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        who = subject_name(experiment, hit.trial)
        label = hit.signature.label
        if label == "no running instance":
            message = f"{who} found no running Ray cluster to join: {hit.evidence.excerpt}"
            fix = (
                "Start the cluster first (`ray start --head`), or pass its address: "
                '`ray.init(address="HEAD:6379")` or `RAY_ADDRESS`; `address="auto"` only finds '
                "a cluster started on this machine."
            )
        elif label == "not a node":
            message = (
                f"{who} is not on a node of the cluster: `ray.init(address=...)` joins through a "
                "Ray node on this machine, and none was started here."
            )
            fix = (
                "Run the driver on a node of the cluster (or `ray start --address=HEAD:6379` here "
                'first), connect with Ray Client, `ray.init("ray://HEAD:10001")`, or submit the '
                "script with `ray job submit`."
            )
        elif label == "node IP not in cluster":
            message = (
                f"{who} reached the cluster's GCS but is not on the cluster's network (Ray "
                f"found none of its nodes at this machine's IP {hit.match.group(1)})."
            )
            fix = (
                "Run the driver on a node of the cluster (`ray job submit`), or connect from "
                'outside with Ray Client: `ray.init("ray://HEAD:10001")`; on a machine with '
                "several addresses, give `ray start` the right `--node-ip-address`."
            )
        elif label == GCS_GAVE_UP and "start GCS" in hit.evidence.excerpt:
            message = (
                f"{who} could not start a local Ray cluster: its GCS exited or never answered "
                f"({hit.evidence.excerpt})."
            )
            fix = (
                "Read `gcs_server.out` and `gcs_server.err` in the session's logs dir (the error "
                "names it): a port already taken (6379 by a Redis or an old Ray: `ray stop`), a "
                "full or unwritable `/tmp/ray`, or a Ray built for another platform are the usual "
                "causes."
            )
        elif label in RAY_CLIENT:
            message, fix = _ray_client(experiment, hit, who)
        elif label == PORT_FORWARD:
            port = hit.match.group(1)
            message = (
                f"{who} could not reach the Ray head through `kubectl port-forward`: the pod "
                f"answered, but nothing listened on port {port} inside it (Ray's "
                f"{HEAD_PORTS[port]})."
            )
            fix = (
                f"Check that Ray's {HEAD_PORTS[port]} started in the head pod: `kubectl logs` "
                "of the head pod and, inside it, `ray status` and the logs in "
                "`/tmp/ray/session_latest/logs` (dashboard.log for 8265). The dashboard "
                "listens on the pod's address only with `--dashboard-host=0.0.0.0` (KubeRay "
                "sets it); a head still starting refuses too: retry once it is ready."
            )
        elif label == JOB_SERVER:
            message = (
                f"{who} could not reach the cluster's job server (the head's dashboard) at "
                f"{hit.match.group(1)}: nothing answered there."
            )
            fix = (
                "Check the head is up and its dashboard started (`ray status` on the head; the "
                "dashboard listens on 8265 unless `--dashboard-port` said otherwise, and only on "
                "localhost unless `--dashboard-host=0.0.0.0`); from this machine, `curl "
                "HEAD:8265/api/version`. A submitter that starts before the head is ready (a "
                "KubeRay RayJob) fails this way once and succeeds on its retry."
            )
        else:
            address = hit.match.group(1) if hit.match.re.groups else None
            message = (
                f"{who} could not reach the Ray cluster's head at {address} ({label}): "
                f"{ANSWER.get(label, 'nothing answered there')}{_port_hint(address)}"
                if address
                else f"{who} could not reach the Ray cluster's head ({label}: "
                f"{hit.evidence.excerpt})."
            )
            fix = (
                "Check the head node is up (`ray status` on it) and the address it printed; from "
                "this machine, `nc -zv HOST PORT` (GCS port 6379 unless `ray start --port` said "
                "otherwise) and open it in the firewall; for Ray Client use `ray://HEAD:10001`. "
                "Use the same Ray and Python versions as the cluster."
            )
        return message, fix
