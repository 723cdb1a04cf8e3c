"""The stages, as the runner (a child process with Ray imported) executes them.

Each stage function returns a `StageResult`; a stage never raises for what it tests. Blocking
Ray calls (a Tune run, a Train run) run in a thread with a bound, so one that hangs is
reported as such instead of hanging the smoke run.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from ray_doctor.model import Evidence
from ray_doctor.smoke import _flight_recorder as flight_recorder
from ray_doctor.smoke import _probes
from ray_doctor.smoke._compat import RayApi, limitation, missing_ray_name
from ray_doctor.smoke._findings import classify, finding, gib, text_evidence
from ray_doctor.smoke._model import CPU_ALLOCATION_CAP, SmokeOptions, StageResult, StageStatus
from ray_doctor.smoke._resources import Bundle, NodeResources, describe, place, shortfall, total
from ray_doctor.smoke._scheduling import Unscheduled, in_thread, run_watched
from ray_doctor.storage import shown_target

NAMESPACE = "ray-doctor-smoke"
CONNECT_TIMEOUT_S = 5.0
RESOURCE_WAIT_S = 30.0  # how long resources that exist but are held elsewhere are waited for
PROBE_TIMEOUT_S = 60.0
TUNE_STAGE_S = 180.0
TRAIN_STAGE_S = 240.0
COLLECTIVE_TIMEOUT_S = 60  # the process group's own timeout (TorchConfig.timeout_s)
ALLREDUCE_ELEMENTS = 1 << 20  # 4 MiB of float32
ALLREDUCE_REPEATS = 5
GRACE_S = 5.0  # kept back from the deadline to report and shut down
# Rules whose signature tables classify an error text, in order: first match names the cause.
TRIAL_ERRORS = ("missing-module", "oom-cuda", "oom-ray-memory-monitor", "device-mismatch")
TRAIN_ERRORS_TABLES = ("collective-timeout", "nccl-error", "port-conflict", "missing-module")


@dataclass
class Context:
    options: SmokeOptions
    deadline: float  # time.monotonic() by which everything must be reported
    storage: str = ""  # where Tune and Train write (options.storage_path or a private dir)
    storage_error: str | None = None  # why options.storage_path cannot be written
    nodes: list[NodeResources] = field(default_factory=list)
    started: bool = False  # smoke started this Ray instance (and shuts it down)
    api: RayApi | None = None  # the Ray API path the stages take (_compat.detect)

    def budget(self, default: float) -> float:
        return max(1.0, min(default, self.deadline - time.monotonic() - GRACE_S))

    @property
    def private_storage(self) -> str:
        return os.path.join(self.options.work_dir, "storage")

    @property
    def run_name(self) -> str:
        return f"ray-doctor-smoke-{self.options.token}"


def bounded(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any, BaseException | None]:
    """(finished, value, exception) of `fn()` run in a thread for at most `seconds`."""
    thread, box = in_thread(fn)
    thread.join(seconds)
    return not thread.is_alive(), box.get("value"), box.get("error")


def _api(ctx: Context) -> RayApi:
    if ctx.api is None:
        from ray_doctor.smoke._compat import detect

        ctx.api = detect()
    return ctx.api


def _watched(ctx: Context, stage: str, fn: Callable[[], Any], seconds: float):
    """`fn()` (a Tune or Train run) bounded in time, and given up as soon as its placement
    group turns out never to be scheduled (smoke/_scheduling.py)."""
    return run_watched(fn, seconds, requests(ctx.options)[stage], ctx.nodes, RESOURCE_WAIT_S)


def api_missing(stage: str, text: str, seconds: float) -> StageResult:
    """Ray refused a name ray-doctor used: a limitation of ray-doctor on this Ray version,
    not a finding about the user's cluster (stage error, exit 2)."""
    name = missing_ray_name(text)
    import ray

    message = limitation(f"Ray {ray.__version__} has no {name}")
    return StageResult(
        stage,
        StageStatus.ERROR,
        duration_s=seconds,
        message=message,
        evidence=[text_evidence("smoke trial", text)],
        details={"missing_api": name},
    )


def import_ray_libraries(options: SmokeOptions) -> None:
    """Import Tune and Train before their stages start in threads: Ray's modules import each
    other, and two threads importing them at once see half-initialised modules."""
    if {"device", "checkpoint", "relaunch"} & set(options.stages):
        import ray.tune
    if "collective" in options.stages:
        import ray.train.torch  # noqa: F401


def ship_probes_by_value() -> None:
    """Send the probe code to workers inside the tasks, so nodes need no ray-doctor."""
    from ray import cloudpickle as ray_serializer  # safe: only serializes our own code out

    ray_serializer.register_pickle_by_value(_probes)  # safe: pickling out, never loading


def _collector():
    import ray

    return ray.remote(num_cpus=0)(_probes.Collector).remote()


def _collected(collector) -> dict[str, Any]:
    import ray

    try:
        return ray.get(collector.get.remote(), timeout=10)
    except Exception:
        return {}


# -------------------------------------------------------------------------------- cluster


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


def _ray_init(ctx: Context):
    import ray

    options = ctx.options
    env_vars = {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(int(ctx.budget(TRAIN_STAGE_S)))}
    env_vars.update(flight_recorder.WORKER_ENV)  # collective stage: which rank broke it
    common = {"namespace": NAMESPACE, "log_to_driver": True, "logging_level": "WARNING"}
    if options.address:
        return ray.init(address=options.address, runtime_env={"env_vars": env_vars}, **common)
    os.environ.update(env_vars)  # inherited by the raylet, so by every worker it starts
    return ray.init(
        address="local",
        _temp_dir=options.ray_temp_dir,
        include_dashboard=False,
        num_gpus=None,
        **common,
    )


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


def requests(options: SmokeOptions) -> dict[str, list[Bundle]]:
    """What each selected stage will ask Ray for, as placement-group bundles."""

    def bundle(cpus: float, gpus: float) -> Bundle:
        return {"CPU": cpus, **({"GPU": gpus} if gpus else {})}

    wanted: dict[str, list[Bundle]] = {}
    if {"device", "checkpoint"} & set(options.stages):
        wanted["device"] = [bundle(options.cpus_per_worker, options.gpus)]
    if "collective" in options.stages:
        per_worker = bundle(options.cpus_per_worker, options.gpus_per_worker)
        wanted["collective"] = [per_worker] * options.worker_count
    if "relaunch" in options.stages and options.relaunch:
        wanted["relaunch"] = [dict(b) for b in options.relaunch.resources]
    return wanted


def _describe_request(stage: str, bundles: list[Bundle]) -> str:
    if stage == "collective" and all(b == bundles[0] for b in bundles):
        return f"{len(bundles)} Train workers x {describe(bundles[0])}"
    if len(bundles) == 1:
        return f"one {stage} trial with {describe(bundles[0])}"
    return f"{stage} bundles " + " + ".join(f"[{describe(b)}]" for b in bundles)


def _insufficient(
    ctx: Context,
    stage: str,
    bundles: list[Bundle],
    busy_s: float | None,
    result_name: str = "cluster",
    needs: str = "needs",
) -> StageResult:
    """`busy_s`: how long resources the cluster has stayed in use by other work (None: the
    cluster lacks them); `needs`: the verb phrase before the request."""
    busy = busy_s is not None
    cluster = total([n.total for n in ctx.nodes])
    lacking = shortfall(total(bundles), cluster)
    request = _describe_request(stage, bundles)
    if busy:
        why = f"the cluster has them, but they stayed in use by other work for {busy_s:.0f} s"
    elif lacking:
        why = "the cluster has " + ", ".join(
            f"{have:g} {name}{'s' if name in ('CPU', 'GPU') and have != 1 else ''}"
            + (f" ({need:g} needed)" if len(bundles) > 1 else "")
            for name, (need, have) in lacking.items()
        )
    else:
        why = "no single node is big enough for one of them (a worker cannot span nodes)"
    nodes = "; ".join(n.describe() for n in ctx.nodes)
    message = f"The {stage} stage {needs} {request}, but {why}; nodes: {nodes}."
    if "GPU" in lacking:
        fix = (
            "Run where the GPUs are: Ray counts a node's GPUs when it starts (check `nvidia-smi` "
            "works there and CUDA_VISIBLE_DEVICES is not empty when `ray start` runs), or ask for "
            "fewer (`--gpus 0` tests the CPU path). An autoscaling cluster adds nodes only for "
            "pending work: request them first (`ray.autoscaler.sdk.request_resources`)."
        )
    elif busy:
        fix = "Wait for the other jobs (`ray status` shows usage), or run smoke with fewer workers."
    else:
        fix = (
            "Ask for less per worker (`--cpus-per-worker`, `--workers`), or add nodes big "
            "enough; `ray status` shows what each node offers."
        )
    evidence = [
        Evidence(f"node {n.ip}", None, f"{n.hostname}: {describe(n.total)}") for n in ctx.nodes
    ]
    return StageResult(
        result_name,
        StageStatus.FAIL,
        message=message,
        evidence=evidence,
        findings=[finding("resources-insufficient", message, fix, evidence)],
    )


def never_scheduled(ctx: Context, stage: str, unscheduled: Unscheduled) -> StageResult:
    """The stage's Ray run never started: its placement group cannot be (or was not)
    placed. Smoke's own request, not the user's network or code, is what failed."""
    busy_s = None if unscheduled.infeasible else unscheduled.seconds
    result = _insufficient(
        ctx,
        stage,
        unscheduled.bundles,
        busy_s,
        result_name=stage,
        needs="was never scheduled: Ray was asked for",
    )
    result.details = {"never_scheduled": True, "bundles": unscheduled.bundles}
    result.duration_s = unscheduled.seconds
    return result


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
            return _with(_insufficient(ctx, stage, bundles, None), details)
        if not _wait_until_free(ctx, bundles):
            return _with(_insufficient(ctx, stage, bundles, RESOURCE_WAIT_S), details)
    cluster = total([n.total for n in ctx.nodes])
    asked = "; ".join(_describe_request(s, b) for s, b in requests(ctx.options).items())
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


def _with(result: StageResult, details: dict[str, Any]) -> StageResult:
    result.details = {**details, **result.details}
    return result


# ---------------------------------------------------------------------- node probes


def start_node_probes(ctx: Context) -> list[tuple[NodeResources, Any]]:
    """One probe task per alive node, pinned to it; they run while the other stages do."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    wants_port = "port" in ctx.options.stages
    probe = ray.remote(num_cpus=0, max_retries=0)(_probes.node_probe)
    started = []
    for node in ctx.nodes:
        strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        # The master port matters where Train workers run: nodes with CPUs (and GPUs if asked).
        worker_node = node.total.get("CPU", 0) > 0 and (
            not ctx.options.gpus or node.total.get("GPU", 0) > 0
        )
        port = ctx.options.master_port if wants_port and worker_node else None
        started.append((node, probe.options(scheduling_strategy=strategy).remote(port)))
    return started


def gather_probes(ctx: Context, started: list[tuple[NodeResources, Any]]) -> list[dict[str, Any]]:
    import ray

    deadline = time.monotonic() + ctx.budget(PROBE_TIMEOUT_S)
    out = []
    for node, ref in started:
        entry: dict[str, Any] = {"node": node}
        try:
            entry.update(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())))
        except Exception as exc:
            entry["error"] = _probes.error_text(exc)
        out.append(entry)
    return out


def _probe_error(stage: str, what: str, text: str, details: dict[str, Any]) -> StageResult:
    """A stage whose node probes did not run: it could not be evaluated."""
    return StageResult(
        stage,
        StageStatus.ERROR,
        message=f"{what}: {text.splitlines()[-1]}",
        evidence=[text_evidence("node probe", text)],
        details=details,
    )


def port_stage(ctx: Context, probes: list[dict[str, Any]]) -> StageResult:
    port = ctx.options.master_port
    checked = [p for p in probes if "port" in p]
    failed = [p for p in checked if not p["port"]["ok"]]
    unknown = [p for p in probes if "error" in p]
    details = {
        "port": port,
        "port_from": ctx.options.master_port_from,
        "nodes": [
            {"ip": p["node"].ip, "hostname": p["node"].hostname, **p["port"]} for p in checked
        ],
    }
    findings, evidence = [], []
    for probe in failed:
        node, result = probe["node"], probe["port"]
        node_evidence = [
            Evidence(f"node {node.ip}", None, f"bind {a['address']}: {a['error']}")
            for a in result["attempts"]
            if not a["ok"]
        ]
        holders = result.get("holders") or []
        node_evidence += [
            Evidence(
                f"node {node.ip}",
                None,
                f"LISTEN {h['address']} pid {h.get('pid')} {h.get('cmdline') or h.get('name') or ''}".strip(),
            )
            for h in holders
        ]
        held_by = ", ".join(
            f"pid {h.get('pid')} ({h.get('name') or '?'})" for h in holders if h.get("pid")
        )
        message = (
            f"Port {port} ({ctx.options.master_port_from}) cannot be bound on {node.ip} "
            f"({node.hostname}): the address is already in use"
            + (f", held by {held_by}." if held_by else ".")
        )
        fix = (
            f"Stop the process holding it on that node (`ss -ltnp | grep :{port}` shows it), or use "
            "another port. Ray Train picks a free master port itself unless your code or "
            "environment sets MASTER_PORT: do not hard-code it."
        )
        findings.append(finding("port-conflict", message, fix, node_evidence))
        evidence += node_evidence
    if findings:
        return StageResult(
            "port",
            StageStatus.FAIL,
            message=findings[0].message,
            evidence=evidence,
            details=details,
            findings=findings,
        )
    if unknown and not checked:
        return _probe_error("port", "The port probe did not run", unknown[0]["error"], details)
    where = ", ".join(p["node"].ip for p in checked)
    count = f"{len(checked)} worker node{'s' if len(checked) != 1 else ''}"
    message = f"Port {port} ({ctx.options.master_port_from}) can be bound on {count}: {where}."
    seconds = max((p["port"].get("seconds", 0.0) for p in checked), default=0.0)
    return StageResult("port", StageStatus.PASS, seconds, message, details=details)


def environment_stage(
    ctx: Context, probes: list[dict[str, Any]]
) -> tuple[StageResult, dict[str, Any]]:
    nodes = []
    for probe in probes:
        node = probe["node"]
        facts = probe.get("fingerprint") or {}
        entry = {
            "node_id": node.node_id,
            "ip": node.ip,
            "hostname": facts.get("hostname", node.hostname),
        }
        entry.update({k: v for k, v in facts.items() if k not in ("hostname", "ip")})
        smi = facts.get("nvidia_smi") or {}
        entry["gpus"] = smi.get("gpus", [])
        entry["resources"] = node.total
        if "error" in probe:
            entry["error"] = probe["error"]
        nodes.append(entry)
    environment = {"driver": _probes.fingerprint(), "nodes": nodes}
    failed = [n for n in nodes if "error" in n]
    if failed and len(failed) == len(nodes):
        error = _probe_error("environment", "No node answered the probe", failed[0]["error"], {})
        return error, environment
    lines = []
    for node in nodes:
        if "error" in node:
            lines.append(f"{node['ip']}: no answer")
            continue
        torch = node.get("torch") or {}
        gpus = node["gpus"]
        gpu_text = f"{len(gpus)} x {gpus[0]['name']}" if gpus else "no GPUs"
        driver = (node.get("nvidia_smi") or {}).get("driver_version")
        lines.append(
            f"{node['hostname']} {node['ip']}: {node.get('cpus')} CPUs, {gib(node.get('memory_total_bytes'))} RAM, "
            f"{gpu_text}{', driver ' + driver if driver else ''}; Ray {node.get('ray')}, "
            f"torch {torch.get('version')} (CUDA {torch.get('cuda') or 'none'}"
            f"{', NCCL ' + str(torch['nccl']) if torch.get('nccl') else ''}), Python {node.get('python')}"
        )
    if ctx.api is not None:
        lines.append(ctx.api.describe())
    status = StageStatus.FAIL if failed else StageStatus.PASS
    seconds = max((p.get("fingerprint_seconds", 0.0) for p in probes), default=0.0)
    result = StageResult(
        "environment", status, seconds, "; ".join(lines), details={"nodes": len(nodes)}
    )
    return result, environment


# ------------------------------------------------------------------------------ storage


def _filesystem(uri: str):
    import pyarrow.fs

    if "://" in uri:
        return pyarrow.fs.FileSystem.from_uri(uri)
    return pyarrow.fs.LocalFileSystem(), os.path.abspath(uri)


def check_storage(ctx: Context) -> None:
    """Can this driver create, write, read back and delete under the storage path? Ray's own
    check fails late and vaguely ("Unable to set up cluster storage"); this names the URI."""
    ctx.storage = ctx.options.storage_path or ctx.private_storage
    if not ctx.options.storage_path:
        os.makedirs(ctx.storage, exist_ok=True)
        return
    probe_dir = f"{ctx.run_name}-write-test"
    try:
        fs, base = _filesystem(ctx.options.storage_path)
        directory = f"{base.rstrip('/')}/{probe_dir}"
        fs.create_dir(directory, recursive=True)
        with fs.open_output_stream(f"{directory}/probe") as out:
            out.write(b"ray-doctor")
        with fs.open_input_stream(f"{directory}/probe") as back:
            if back.read() != b"ray-doctor":
                raise OSError("what was read back differs from what was written")
        fs.delete_dir(directory)
    except Exception as exc:
        ctx.storage_error = f"{type(exc).__name__}: {exc}".strip()
        ctx.storage = ctx.private_storage
        os.makedirs(ctx.storage, exist_ok=True)


# ---------------------------------------------------------------------- device, checkpoint


def tune_stages(ctx: Context) -> tuple[StageResult, StageResult]:
    """One real Tune trial with the requested resources probes the devices and reports a
    checkpoint; a Ray task (no CPUs, spread to another node where there is one) restores it."""
    from ray import tune

    options = ctx.options
    api = _api(ctx)
    RunConfig, FailureConfig = api.tune_configs()
    collector = _collector()
    trainable = _probes.make_smoke_trial(
        collector, options.gpus, options.memory_fraction, CPU_ALLOCATION_CAP, api.tune_module
    )
    resources = {"cpu": options.cpus_per_worker, "gpu": options.gpus}
    budget = ctx.budget(TUNE_STAGE_S)
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        tune_config=tune.TuneConfig(num_samples=1, time_budget_s=budget),
        run_config=RunConfig(
            name=ctx.run_name,
            storage_path=ctx.storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    started = time.monotonic()
    run = _watched(ctx, "device", tuner.fit, budget)
    if run.unscheduled is not None:
        never = never_scheduled(ctx, "device", run.unscheduled)
        skipped = StageResult(
            "checkpoint", StageStatus.SKIP, message="Not run: the smoke trial was never scheduled."
        )
        return never, skipped
    finished, results, error = run.finished, run.value, run.error
    seconds = time.monotonic() - started
    values = _collected(collector)
    trial_error = None
    if error is not None:
        trial_error = _probes.error_text(error)
    elif finished and results is not None and len(results) and results[0].error is not None:
        trial_error = _probes.error_text(results[0].error)
    if finished and results is not None and len(results) and results[0].checkpoint is not None:
        values["checkpoint_restore"] = _restore(ctx, results[0].checkpoint)
    run = {
        "seconds": seconds,
        "finished": finished,
        # Tune stops a trial at its time budget without an error: that is not a stage failure.
        "out_of_time": not finished or seconds >= budget - 1.0,
        "budget": budget,
        "storage": ctx.storage,
        "trial_error": trial_error,
    }
    return _device_result(ctx, values, run), _checkpoint_result(ctx, values, run)


def _restore(ctx: Context, checkpoint) -> dict[str, Any]:
    import ray

    restore = ray.remote(num_cpus=0, max_retries=0, scheduling_strategy="SPREAD")(
        _probes.restore_checkpoint
    )
    try:
        return ray.get(restore.remote(checkpoint), timeout=ctx.budget(TUNE_STAGE_S))
    except Exception as exc:
        return {"ok": False, "error": _probes.error_text(exc)}


def _out_of_time(stage: str, run: dict[str, Any]) -> StageResult:
    message = (
        f"The smoke trial did not finish the {stage} check in the {run['budget']:.0f} s left "
        "(pending, or slow to start): raise --timeout."
    )
    return StageResult(stage, StageStatus.ERROR, duration_s=run["seconds"], message=message)


def _trial_failed(stage: str, run: dict[str, Any], fallback: str) -> StageResult:
    if run["out_of_time"] and not run["trial_error"]:
        return _out_of_time(stage, run)
    text = run["trial_error"] or "the trial ended without reporting"
    if missing_ray_name(text):
        return api_missing(stage, text, run["seconds"])
    rule_id, line = classify(text, TRIAL_ERRORS, fallback)
    evidence = [text_evidence("smoke trial", line or text)]
    message = f"The smoke trial failed before the {stage} check: {line}"
    fix = "See the error: the trial could not run the check, so the other results of this stage are unknown."
    return StageResult(
        stage,
        StageStatus.FAIL,
        duration_s=run["seconds"],
        message=message,
        evidence=evidence,
        findings=[finding(rule_id, message, fix, evidence)],
    )


def _device_result(ctx: Context, values: dict[str, Any], run: dict[str, Any]) -> StageResult:
    device = values.get("device")
    if device is None:
        return _trial_failed("device", run, "device-unavailable")
    details = {
        k: device.get(k)
        for k in (
            "cuda_visible_devices",
            "torch",
            "cuda_available",
            "device_count",
            "hostname",
            "node_ip",
        )
    }
    details.update(matmul=device.get("matmul", []), headroom=device.get("headroom", []))
    where = f"trial on {device.get('node_ip')}"
    findings = _visibility(ctx, device, where) + _compute(device, where) + _headroom(device, where)
    seconds = run["seconds"]  # the trial: scheduling, the probe and the checkpoint
    details["tune_run_seconds"] = seconds
    if findings:
        status = (
            StageStatus.FAIL if any(f.severity.rank >= 3 for f in findings) else StageStatus.PASS
        )
        evidence = [e for f in findings for e in f.evidence]
        return StageResult(
            "device",
            status,
            duration_s=seconds,
            message=findings[0].message,
            evidence=evidence,
            details=details,
            findings=findings,
        )
    return StageResult(
        "device",
        StageStatus.PASS,
        duration_s=seconds,
        message=_device_summary(device),
        details=details,
    )


def _device_summary(device: dict[str, Any]) -> str:
    matmuls = device.get("matmul", [])
    names = sorted({m.get("name") or m["device"] for m in matmuls})
    rate = sum(m.get("tflops") or 0 for m in matmuls)
    parts = [
        f"{len(matmuls)} device{'s' if len(matmuls) != 1 else ''} ({', '.join(names)}): "
        f"{MATMUL} matmul checked against the CPU, {rate * 1000:.1f} GFLOP/s"
    ]
    for room in device.get("headroom", []):
        if room["device"] == "cpu":
            parts.append(
                f"host memory: {gib(room['requested_bytes'])} allocated and released; "
                f"{gib(room['free_bytes'])} free of {gib(room['total_bytes'])}, "
                f"{gib(room['margin_bytes'])} below Ray's {room['memory_monitor_threshold']:g} memory-monitor threshold"
            )
        else:
            parts.append(
                f"{room['device']}: {gib(room['requested_bytes'])} ({room['fraction']:g} of "
                f"{gib(room['free_bytes'])} free, {gib(room['total_bytes'])} total) allocated and released"
            )
    return "; ".join(parts) + "."


MATMUL = f"{_probes.MATMUL_N}x{_probes.MATMUL_N}"


def _visibility(ctx: Context, device: dict[str, Any], where: str) -> list:
    wanted = ctx.options.gpus
    seen = device.get("device_count") or 0
    if not wanted or seen >= wanted:
        return []
    torch = device.get("torch")
    visible = device.get("cuda_visible_devices")
    why = ""
    if device.get("error"):
        why = f": {device['error'].splitlines()[-1]}"
    elif torch and "+cpu" in str(torch):
        why = f": torch {torch} is a CPU-only build"
    message = (
        f"Ray gave the smoke trial {wanted} GPU{'s' if wanted != 1 else ''} "
        f"(CUDA_VISIBLE_DEVICES={visible!r}), but torch sees {seen}{why}."
    )
    evidence = [
        Evidence(where, None, f"CUDA_VISIBLE_DEVICES={visible!r}"),
        Evidence(
            where,
            None,
            f"torch {torch}: cuda available {device.get('cuda_available')}, {seen} devices",
        ),
    ]
    fix = (
        "Install a CUDA build of torch matching the node's driver, and do not set "
        "CUDA_VISIBLE_DEVICES yourself inside Ray tasks; check `nvidia-smi` on the node."
    )
    return [finding("device-unavailable", message, fix, evidence)]


def _compute(device: dict[str, Any], where: str) -> list:
    out = []
    for result in device.get("matmul", []):
        if result.get("ok"):
            continue
        if result.get("error"):
            rule_id, line = classify(result["error"], ("oom-cuda",), "device-unavailable")
            what = f"raised {line}"
        else:
            rule_id, line = "device-unavailable", ""
            what = f"differs from the CPU result (max relative error {result.get('max_relative_error')})"
        message = f"A {MATMUL} matmul on {result['device']} {what}."
        evidence = [Evidence(where, None, line or message)]
        fix = "Drain the node and check the GPU (`nvidia-smi -q`, `dmesg | grep -i xid`, DCGM diagnostics)."
        out.append(finding(rule_id, message, fix, evidence))
    return out


def _headroom(device: dict[str, Any], where: str) -> list:
    from ray_doctor.findings import Severity

    out = []
    for room in device.get("headroom", []):
        name = room["device"]
        free, whole = room.get("free_bytes"), room.get("total_bytes")
        fix = (
            "Stop what holds the memory (`nvidia-smi` lists GPU processes; `ps aux --sort=-rss` on "
            "the host), give each trial a whole device, or run fewer trials per node."
        )
        evidence = [Evidence(where, None, f"{name}: {gib(free)} free of {gib(whole)}")]
        if not room.get("ok"):
            message = (
                f"Allocating {gib(room['requested_bytes'])} on {name} ({room['fraction']:g} of what was "
                f"free) failed: {room.get('error', '').splitlines()[-1] if room.get('error') else 'unknown error'}"
            )
            evidence.append(text_evidence(where, room.get("error", "")))
            out.append(finding("memory-headroom-low", message, fix, evidence))
        elif name == "cpu" and room["margin_bytes"] < 0.1 * whole:
            message = (
                f"The node is {gib(room['margin_bytes'])} from Ray's memory-monitor threshold "
                f"({room['memory_monitor_threshold']:g} of {gib(whole)}): a trial that grows by more "
                "is killed."
            )
            out.append(
                finding("memory-headroom-low", message, fix, evidence, severity=Severity.WARNING)
            )
        elif name != "cpu" and free is not None and whole and free < 0.5 * whole:
            message = f"Only {gib(free)} of {gib(whole)} is free on {name} before the trial starts: another process holds the rest."
            out.append(
                finding("memory-headroom-low", message, fix, evidence, severity=Severity.WARNING)
            )
    return out


def _checkpoint_result(ctx: Context, values: dict[str, Any], run: dict[str, Any]) -> StageResult:
    saved, restored = values.get("checkpoint_save"), values.get("checkpoint_restore")
    details: dict[str, Any] = {
        "storage": ctx.options.storage_path or "(private temp dir)",
        "save": saved,
        "restore": restored,
    }
    findings = []
    if ctx.storage_error:
        uri = shown_target(ctx.options.storage_path or "")
        message = f"The storage path {uri} cannot be written from this driver: {ctx.storage_error}"
        evidence = [Evidence(uri, None, ctx.storage_error)]
        fix = (
            "Use a storage_path every node can write: a cloud URI (s3://, gs://) with credentials "
            "on every node, or a shared filesystem mounted at the same path everywhere. Check the "
            "bucket exists, the permissions, and endpoint/region settings."
        )
        findings.append(finding("storage-unreachable", message, fix, evidence))
        details["checked_on"] = "a private temp dir instead"
        if saved and saved.get("ok") and restored and restored.get("ok"):
            findings[
                0
            ].message += " The round trip itself passed on a private temp dir: the storage path is what fails."
    seconds = sum(
        (d or {}).get(k) or 0 for d, k in ((saved, "report_seconds"), (restored, "restore_seconds"))
    )
    if saved is None and restored is None:
        if findings:
            return StageResult(
                "checkpoint",
                StageStatus.FAIL,
                message=findings[0].message,
                evidence=findings[0].evidence,
                details=details,
                findings=findings,
            )
        return _trial_failed("checkpoint", run, "checkpoint-roundtrip")
    problem = None
    if saved and not saved.get("ok"):
        problem = f"saving or reporting the checkpoint raised {saved.get('error', '').splitlines()[-1] if saved.get('error') else '?'}"
    elif restored is None and run["out_of_time"] and not run["trial_error"]:
        return _out_of_time("checkpoint", run)
    elif restored is None:
        error = (run.get("trial_error") or "").strip().splitlines()
        problem = "the trial reported no checkpoint Tune could hand back" + (
            f" ({error[-1]})" if error else ""
        )
    elif not restored.get("ok"):
        problem = "the restored checkpoint differs from the saved one: " + "; ".join(
            restored.get("problems") or [restored.get("error", "?")]
        )
    if problem:
        message = f"Checkpoint round trip through {shown_target(ctx.storage)} failed: {problem}."
        evidence = [Evidence(shown_target(ctx.storage), None, problem)]
        fix = (
            "Use a storage_path every node can read and write (a cloud URI or a shared mount), "
            "with enough space; re-run `ray-doctor smoke --storage-path URI` until this passes."
        )
        rule_id, _ = classify(problem, ("disk-full", "storage-unreachable"), "checkpoint-roundtrip")
        findings.append(finding(rule_id, message, fix, evidence))
    if findings:
        return StageResult(
            "checkpoint",
            StageStatus.FAIL,
            duration_s=seconds,
            message=findings[-1].message,
            evidence=[e for f in findings for e in f.evidence],
            details=details,
            findings=findings,
        )
    writer = (saved.get("written_by") or {}) if saved else {}
    reader = restored.get("restored_by") or {}
    message = (
        f"Saved on {writer.get('ip')} (pid {writer.get('pid')}), reported to "
        f"{shown_target(ctx.storage)} in {saved.get('report_seconds', 0):.2f} s, restored by a "
        f"Ray task on {reader.get('ip')} "
        f"(pid {reader.get('pid')}) in {restored.get('restore_seconds', 0):.2f} s; every byte matches."
    )
    return StageResult(
        "checkpoint", StageStatus.PASS, duration_s=seconds, message=message, details=details
    )


# ----------------------------------------------------------------------------- collective


def _trainer(ctx: Context, loop):
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    options = ctx.options
    per_worker = {"CPU": options.cpus_per_worker}
    if options.gpus:
        per_worker["GPU"] = options.gpus_per_worker
    scaling: dict[str, Any] = {
        "num_workers": options.worker_count,
        "use_gpu": bool(options.gpus),
        "resources_per_worker": per_worker,
    }
    trainer_resources = _api(ctx).trainer_resources()
    if trainer_resources is not None:
        scaling["trainer_resources"] = trainer_resources
    return TorchTrainer(
        loop,
        scaling_config=ScalingConfig(**scaling),
        torch_config=TorchConfig(
            backend="nccl" if options.gpus else "gloo", timeout_s=COLLECTIVE_TIMEOUT_S
        ),
        run_config=RunConfig(
            name=f"{ctx.run_name}-collective",
            storage_path=ctx.storage,
            failure_config=FailureConfig(max_failures=0),
        ),
    )


def collective_stage(ctx: Context) -> StageResult:
    _api(ctx).require("train")
    collector = _collector()
    trainer = _trainer(
        ctx, _probes.make_allreduce_loop(collector, ALLREDUCE_ELEMENTS, ALLREDUCE_REPEATS)
    )
    budget = ctx.budget(TRAIN_STAGE_S)
    started = time.monotonic()
    run = _watched(ctx, "collective", trainer.fit, budget)
    if run.unscheduled is not None:
        return never_scheduled(ctx, "collective", run.unscheduled)
    finished, error = run.finished, run.error
    seconds = time.monotonic() - started
    values = _collected(collector)
    ranks = sorted((v for k, v in values.items() if k.startswith("rank:")), key=lambda r: r["rank"])
    result = analyse_ranks(ctx, ranks, error, finished, seconds)
    return flight_recorder.attribute_failure(result, values)


def analyse_ranks(
    ctx: Context,
    ranks: list[dict[str, Any]],
    error: BaseException | None,
    finished: bool,
    seconds: float,
) -> StageResult:
    """The collective stage's verdict from what every rank pushed and how the run ended."""
    world = ctx.options.worker_count
    backend = "nccl" if ctx.options.gpus else "gloo"
    details = {
        "backend": backend,
        "world_size": world,
        "ranks": ranks,
        "run_seconds": seconds,
        "bytes": ALLREDUCE_ELEMENTS * 4,
    }
    done = [r for r in ranks if r.get("stage") == "done"]
    wrong = [r for r in done if not r.get("ok")]
    if wrong:
        message = "; ".join(
            f"rank {r['rank']} on {r['ip']} got {r['value']:g}, expected {r['expected']:g}"
            for r in wrong
        )
        message = f"The allreduce returned wrong sums: {message}."
        evidence = [
            Evidence(
                f"rank {r['rank']} ({r['ip']}, {r['device']})",
                None,
                f"allreduce sum {r['value']:g} != {r['expected']:g}",
            )
            for r in wrong
        ]
        fix = "Wrong sums point at the device or the interconnect: check that node's GPUs (`nvidia-smi -q`, DCGM) and links."
        return StageResult(
            "collective",
            StageStatus.FAIL,
            duration_s=seconds,
            message=message,
            evidence=evidence,
            details=details,
            findings=[finding("collective-failed", message, fix, evidence)],
        )
    if error is not None or not finished or len(done) < world:
        return _collective_failure(ctx, error, finished, ranks, done, seconds, details)
    median = sorted(r["seconds"] for r in done)[len(done) // 2]
    busbw = min(r.get("busbw_gbps") or 0 for r in done)
    nodes = sorted({r["ip"] for r in done})
    message = (
        f"{world} rank{'s' if world != 1 else ''} ({backend}, {', '.join(sorted({r['device'] for r in done}))}) on "
        f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}: allreduce of {ALLREDUCE_ELEMENTS * 4 / 2**20:.0f} MiB "
        f"checked on every rank, {median * 1000:.1f} ms median, bus bandwidth {busbw:.2f} GB/s."
    )
    return StageResult(
        "collective", StageStatus.PASS, duration_s=seconds, message=message, details=details
    )


def _collective_failure(ctx, error, finished, ranks, done, seconds, details) -> StageResult:
    world = ctx.options.worker_count
    joined = {r["rank"] for r in ranks}
    missing = sorted(set(range(world)) - {r["rank"] for r in done})
    if error is not None:
        text = _probes.error_text(error)
        if missing_ray_name(text):
            return api_missing("collective", text, seconds)
        details["traceback"] = "".join(traceback.format_exception(error))
        rule_id, line = classify(text, TRAIN_ERRORS_TABLES, "collective-failed")
        message = f"The Train run failed before every rank finished the allreduce (ranks {missing} did not): {line}"
        evidence = [text_evidence("TorchTrainer.fit()", line or text)]
    else:
        rule_id = "collective-timeout"
        never = sorted(set(range(world)) - joined)
        message = (
            f"The allreduce did not complete within {seconds:.0f} s: ranks {missing} never finished"
            + (f", ranks {never} never joined" if never else "")
            + "."
        )
        evidence = [
            Evidence(f"rank {r['rank']} ({r['ip']})", None, f"stage {r.get('stage')}")
            for r in ranks
        ] or [Evidence("TorchTrainer.fit()", None, "no rank reported")]
    fix = (
        "Look at the rank that did not finish: its node's logs (`/tmp/ray/session_latest/logs`). "
        "Ranks that never join cannot reach each other or were never scheduled: open the ports "
        "between nodes and set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the right interface."
    )
    status = StageStatus.FAIL
    return StageResult(
        "collective",
        status,
        duration_s=seconds,
        message=message,
        evidence=evidence,
        details=details,
        findings=[finding(rule_id, message, fix, evidence)],
    )


# ------------------------------------------------------------------------------- relaunch


def storage_join(storage: str, name: str) -> str:
    """`storage/name`, keeping a URI's query (s3://bucket/path?endpoint_override=...)."""
    if "://" not in storage:
        return os.path.join(storage, name)
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(storage)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + name))


def load_entrypoint(spec: str):
    """`module:attr` (imported with the working dir on sys.path, as `python -m` would) or
    `path/to/file.py:attr`. User code outside site-packages is shipped to the workers by
    value, so they need not have it on their path."""
    import importlib
    import importlib.util
    import sys

    target, _, attr = spec.rpartition(":")
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        name = os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(target)
    value = module
    for part in attr.split("."):
        value = getattr(value, part)
    if "site-packages" not in (getattr(module, "__file__", "") or ""):
        from ray import cloudpickle as ray_serializer  # safe: only serializes user code out

        ray_serializer.register_pickle_by_value(module)  # safe: pickling out, never loading
    return value


def relaunch_run(ctx: Context) -> dict[str, Any]:
    """Run the user's trainable with the failed trial's config and resources; the parent
    reads the experiment it writes with inspect's own scan and rules."""
    from ray import tune

    plan = ctx.options.relaunch
    assert plan is not None
    facts: dict[str, Any] = {"entrypoint": plan.entrypoint, "iterations_asked": plan.iterations}
    try:
        trainable = load_entrypoint(plan.entrypoint)
    except Exception as exc:
        facts["import_error"] = _probes.error_text(exc)
        return facts
    RunConfig, FailureConfig = _api(ctx).tune_configs()
    collector = _collector()
    name = f"{ctx.run_name}-relaunch"
    tuner = tune.Tuner(
        tune.with_resources(
            _probes.measured(trainable, collector),
            tune.PlacementGroupFactory(plan.resources, strategy=plan.strategy),
        ),
        param_space=plan.config,
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=RunConfig(
            name=name,
            storage_path=ctx.storage,
            stop={"training_iteration": plan.iterations},
            failure_config=FailureConfig(max_failures=0),
            verbose=1,
        ),
    )
    budget = ctx.budget(ctx.options.timeout_s)
    started = time.monotonic()
    finished, results, error = bounded(tuner.fit, budget)
    facts.update(
        seconds=time.monotonic() - started,
        finished=finished,
        experiment_path=storage_join(ctx.storage, name),
        peaks=_collected(collector).get("relaunch_peaks"),
    )
    if error is not None:
        facts["run_error"] = _probes.error_text(error)
    if finished and results is not None and len(results):
        result = results[0]
        facts["errored"] = result.error is not None
        facts["error"] = _probes.error_text(result.error) if result.error is not None else None
        facts["iterations"] = (result.metrics or {}).get("training_iteration")
    return facts
