"""The `cluster` stage: connect to (or start) Ray, and check that the cluster can hold what
the other stages will ask for.
"""

from __future__ import annotations

import os
import socket
import time
from urllib.parse import urlparse

from ray_doctor.model import Evidence
from ray_doctor.smoke import _flight_recorder as flight_recorder
from ray_doctor.smoke import _probes
from ray_doctor.smoke._findings import finding, gib, text_evidence
from ray_doctor.smoke._model import StageResult, StageStatus
from ray_doctor.smoke._resources import Bundle, NodeResources, describe, place, shortfall, total
from ray_doctor.smoke.stages import CONNECT, Stage
from ray_doctor.smoke.stages._common import (
    CONNECT_TIMEOUT_S,
    NAMESPACE,
    RESOURCE_WAIT_S,
    TRAIN_STAGE_S,
    Context,
    describe_request,
    insufficient,
    requests,
    with_details,
)


def _host_port(address: str) -> tuple[str, int] | None:
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    try:
        port = parsed.port
    except ValueError:
        return None
    if not parsed.hostname or port is None:
        return None
    return parsed.hostname, port


def _unreachable(address: str, reason: str, evidence: list[Evidence]) -> StageResult:
    message = f"Could not join the Ray cluster at {address}: {reason}."
    fix = (
        "Check the head node is up (`ray status` on it) and the address it printed at "
        "`ray start --head` (GCS port 6379 by default; `ray://HOST:10001` for Ray Client); "
        "from here, `nc -zv HOST PORT`. Driver and cluster need the same Ray and Python versions."
    )
    return StageResult(
        "cluster",
        StageStatus.FAIL,
        message=message,
        evidence=evidence,
        details={"address": address},
        findings=[finding("cluster-unreachable", message, fix, evidence)],
    )


# Ray's words when the node it started did not register in time (Ray 2.x, node.py).
SLOW_START = "timed out during startup"
RETRY_START_S = 60.0  # the time left that another local start needs (its 30 s wait, and on)
START_ATTEMPTS = 3


def _ray_init(ctx: Context):
    import ray

    options = ctx.options
    env_vars = {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(int(ctx.budget(TRAIN_STAGE_S)))}
    env_vars.update(flight_recorder.WORKER_ENV)  # collective stage: which rank broke it
    common = {"namespace": NAMESPACE, "log_to_driver": True, "logging_level": "WARNING"}
    if options.address:
        return ray.init(address=options.address, runtime_env={"env_vars": env_vars}, **common)
    os.environ.update(env_vars)  # inherited by the raylet, so by every worker it starts
    local = {
        "address": "local",
        "_temp_dir": options.ray_temp_dir,
        "include_dashboard": False,
        "num_gpus": None,
        **common,
    }
    # Ray waits a fixed 30 s for the raylet it started to register with the GCS
    # (`raylet_start_wait_time_s` in ray/_private/node.py, not configurable): on a saturated
    # machine that can pass while both are still coming up. A machine that slow is not the
    # cluster fault smoke looks for, so the start is tried again while --timeout leaves room.
    attempt = 1
    while True:
        try:
            return ray.init(**local)
        except Exception as exc:
            time_left = ctx.deadline - time.monotonic()
            slow = SLOW_START in str(exc)
            if not slow or attempt == START_ATTEMPTS or time_left < RETRY_START_S:
                raise
        ray.shutdown()  # the half-started node's processes
        attempt += 1


def _nodes() -> list[NodeResources]:
    import ray

    return [
        NodeResources(
            node["NodeID"],
            node.get("NodeManagerAddress", "?"),
            node.get("NodeManagerHostname", "?"),
            {k: float(v) for k, v in node.get("Resources", {}).items()},
        )
        for node in ray.nodes()
        if node.get("Alive")
    ]


def _wait_until_free(ctx: Context, bundles: list[Bundle]) -> bool:
    import ray

    deadline = time.monotonic() + ctx.budget(RESOURCE_WAIT_S)
    need = total(bundles)
    while True:
        if not shortfall(need, {k: float(v) for k, v in ray.available_resources().items()}):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def connect(ctx: Context) -> StageResult:
    """Join or start Ray, then check every selected stage's request can be placed."""
    address = ctx.options.address
    if address and address not in ("auto", "local"):
        where = _host_port(address)
        if where is None:
            return _unreachable(address, "not a HOST:PORT or ray://HOST:PORT address", [])
        try:
            socket.create_connection(where, timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            evidence = [Evidence(address, None, f"TCP connect to {where[0]}:{where[1]}: {reason}")]
            return _unreachable(
                address, f"nothing answers at {where[0]}:{where[1]} ({reason})", evidence
            )
    try:
        context = _ray_init(ctx)
    except Exception as exc:
        text = _probes.error_text(exc)
        if address:
            return _join_failed(address, exc)
        message = f"Could not start a local Ray instance: {text.splitlines()[-1]}"
        return StageResult(
            "cluster",
            StageStatus.ERROR,
            message=message,
            evidence=[text_evidence("ray.init", text)],
        )
    import ray

    ctx.started = not address
    ctx.nodes = _nodes()
    details = {
        "ray_version": ray.__version__,
        "address": getattr(context, "address_info", {}).get("gcs_address") or address,
        "started": ctx.started,
        "ray_temp_dir": ctx.options.ray_temp_dir if ctx.started else None,
        "nodes": [
            {"node_id": n.node_id, "ip": n.ip, "hostname": n.hostname, "resources": n.total}
            for n in ctx.nodes
        ],
        "requests": {},
    }
    for stage, bundles in requests(ctx.options).items():
        details["requests"][stage] = bundles
        if place(bundles, ctx.nodes):
            return with_details(insufficient(ctx, stage, bundles, None), details)
        if not _wait_until_free(ctx, bundles):
            return with_details(insufficient(ctx, stage, bundles, RESOURCE_WAIT_S), details)
    cluster = total([n.total for n in ctx.nodes])
    asked = "; ".join(describe_request(s, b) for s, b in requests(ctx.options).items())
    message = (
        f"Ray {ray.__version__}, {len(ctx.nodes)} node{'s' if len(ctx.nodes) != 1 else ''} "
        f"({describe(cluster)}, {gib(cluster.get('memory'))} memory); "
        f"{'started locally' if ctx.started else 'joined ' + str(details['address'])}."
        + (f" Fits: {asked}." if asked else "")
    )
    return StageResult("cluster", StageStatus.PASS, message=message, details=details)


def token_available() -> bool:
    """A Ray auth token this driver could send (Ray's own places for it)."""
    from pathlib import Path

    return bool(
        os.environ.get("RAY_AUTH_TOKEN")
        or os.environ.get("RAY_AUTH_TOKEN_PATH")
        or (Path.home() / ".ray" / "auth_token").exists()
    )


def _join_failed(address: str, exc: BaseException) -> StageResult:
    cause = _probes.root_cause(exc)
    text = f"{type(cause).__name__}: {cause}"
    if "InvalidAuthToken" in text or "AuthenticationError" in text:
        mode = os.environ.get("RAY_AUTH_MODE", "unset")
        result = _unreachable(
            address,
            "the cluster requires token authentication and this driver sent no valid token "
            f"(RAY_AUTH_MODE is {mode}; a token {'is' if token_available() else 'is not'} "
            "available here)",
            [
                Evidence(
                    address, None, "InvalidAuthToken: Authentication token is missing or incorrect"
                )
            ],
        )
        result.details["auth"] = "token-required"
        return result
    first = text.strip().splitlines()[0]
    return _unreachable(address, f"ray.init failed: {first}", [Evidence(address, None, first)])


def token_mode_warning(address: str):
    """Smoke joined only with RAY_AUTH_MODE=token: the user's drivers need it too."""
    from ray_doctor.findings import Severity

    message = (
        f"The cluster at {address} requires token authentication, and a driver started like "
        "this one sends no token: smoke joined only with RAY_AUTH_MODE=token. Your own "
        "drivers fail to connect the same way until they set it."
    )
    fix = (
        "Set RAY_AUTH_MODE=token where drivers run (the token comes from RAY_AUTH_TOKEN, "
        "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, and must match the cluster's)."
    )
    evidence = [
        Evidence(address, None, "InvalidAuthToken without RAY_AUTH_MODE=token; joined with it")
    ]
    return finding("cluster-unreachable", message, fix, evidence, severity=Severity.WARNING)


def run(ctx: Context) -> StageResult:
    result = connect(ctx)
    if result.status == StageStatus.PASS:
        details = result.details
        ctx.emit("ray", version=details.get("ray_version"), address=details.get("address"))
    return result


STAGE = Stage(
    "cluster",
    "cluster resources satisfy the request",
    position=0,
    run=run,
    phase=CONNECT,
    default=True,
    with_relaunch=True,
)
