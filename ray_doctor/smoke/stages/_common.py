"""What the smoke stages share: the run's context, bounded and watched Ray runs, resource
requests and the `resources-insufficient` result, the node probes, the storage check, and the
results of a smoke trial that failed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray_doctor.model import Evidence
from ray_doctor.smoke import _probes
from ray_doctor.smoke._compat import RayApi, limitation, missing_ray_name
from ray_doctor.smoke._findings import classify, finding, text_evidence
from ray_doctor.smoke._model import SmokeOptions, StageResult, StageStatus
from ray_doctor.smoke._resources import Bundle, NodeResources, describe, shortfall, total
from ray_doctor.smoke._scheduling import Unscheduled, in_thread, run_watched

NAMESPACE = "ray-doctor-smoke"


CONNECT_TIMEOUT_S = 5.0


RESOURCE_WAIT_S = 30.0  # how long resources that exist but are held elsewhere are waited for


# The node probes need a worker process on each node, which a saturated machine can take
# minutes to start: they are waited for until the run's own --timeout, not a fixed minute
# (a dead node does not make this wait: Ray fails a task pinned to a dead node).
PROBE_TIMEOUT_S = float("inf")


TUNE_STAGE_S = 180.0


TRAIN_STAGE_S = 240.0


GRACE_S = 5.0  # kept back from the deadline to report and shut down


# Rules whose signature tables classify an error text, in order: first match names the cause.
TRIAL_ERRORS = ("missing-module", "oom-cuda", "oom-ray-memory-monitor", "device-mismatch")


def _ignore(kind: str, **data: Any) -> None:
    pass


@dataclass
class Context:
    options: SmokeOptions
    deadline: float  # time.monotonic() by which everything must be reported
    storage: str = ""  # where Tune and Train write (options.storage_path or a private dir)
    storage_error: str | None = None  # why options.storage_path cannot be written
    nodes: list[NodeResources] = field(default_factory=list)
    started: bool = False  # smoke started this Ray instance (and shuts it down)
    api: RayApi | None = None  # the Ray API path the stages take (_compat.detect)
    emit: Callable[..., None] = _ignore  # emit(kind, **data): an event for the parent

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


def ray_api(ctx: Context) -> RayApi:
    if ctx.api is None:
        from ray_doctor.smoke._compat import detect

        ctx.api = detect()
    return ctx.api


def watched(ctx: Context, stage: str, fn: Callable[[], Any], seconds: float):
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


def import_ray_libraries(pieces: frozenset[str]) -> None:
    """Import Tune and Train (the API `pieces` the selected stages use) before their stages
    start in threads: Ray's modules import each other, and two threads importing them at once
    see half-initialised modules."""
    if "tune" in pieces:
        import ray.tune
    if "train" in pieces:
        import ray.train.torch  # noqa: F401


def ship_probes_by_value() -> None:
    """Send the probe code to workers inside the tasks, so nodes need no ray-doctor."""
    from ray import cloudpickle as ray_serializer  # safe: only serializes our own code out

    ray_serializer.register_pickle_by_value(_probes)  # safe: pickling out, never loading


def new_collector():
    import ray

    return ray.remote(num_cpus=0)(_probes.Collector).remote()


COLLECT_TIMEOUT_S = 10


def collected_values(collector) -> dict[str, Any] | None:
    """What the probes pushed to the collector; None when it did not answer in time (a busy
    machine): the stage then cannot be evaluated, which says nothing about the cluster."""
    import ray

    try:
        return ray.get(collector.get.remote(), timeout=COLLECT_TIMEOUT_S)
    except Exception:
        return None


def not_collected(stage: str, seconds: float) -> StageResult:
    message = (
        f"What the probes reported could not be collected within {COLLECT_TIMEOUT_S} s (a "
        "busy machine?): this stage could not be evaluated; run smoke again."
    )
    return StageResult(stage, StageStatus.ERROR, duration_s=seconds, message=message)


def bundle(cpus: float, gpus: float) -> Bundle:
    return {"CPU": cpus, **({"GPU": gpus} if gpus else {})}


def requests(options: SmokeOptions) -> dict[str, list[Bundle]]:
    """What each selected stage will ask Ray for, as placement-group bundles (each stage's
    `Stage.request`), in stage order."""
    from ray_doctor.smoke.stages import registry

    wanted: dict[str, list[Bundle]] = {}
    for stage in registry().values():
        if stage.request is not None and stage.wanted(options.stages):
            bundles = stage.request(options)
            if bundles:
                wanted[stage.name] = bundles
    return wanted


def describe_request(stage: str, bundles: list[Bundle]) -> str:
    if stage == "collective" and all(b == bundles[0] for b in bundles):
        workers = "Train worker" if len(bundles) == 1 else "Train workers"
        return f"{len(bundles)} {workers} x {describe(bundles[0])}"
    if len(bundles) == 1:
        return f"one {stage} trial with {describe(bundles[0])}"
    return f"{stage} bundles " + " + ".join(f"[{describe(b)}]" for b in bundles)


def insufficient(
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
    request = describe_request(stage, bundles)
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
    result = insufficient(
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


def with_details(result: StageResult, details: dict[str, Any]) -> StageResult:
    result.details = {**details, **result.details}
    return result


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


def probe_error(stage: str, what: str, text: str, details: dict[str, Any]) -> StageResult:
    """A stage whose node probes did not run: it could not be evaluated."""
    return StageResult(
        stage,
        StageStatus.ERROR,
        message=f"{what}: {text.splitlines()[-1]}",
        evidence=[text_evidence("node probe", text)],
        details=details,
    )


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


def out_of_time(stage: str, run: dict[str, Any]) -> StageResult:
    message = (
        f"The smoke trial did not finish the {stage} check in the {run['budget']:.0f} s left "
        "(pending, or slow to start): raise --timeout."
    )
    return StageResult(stage, StageStatus.ERROR, duration_s=run["seconds"], message=message)


# Ray's words for a get that outlived its timeout: a stage squeezed by --timeout, not a fault.
TIMEOUT_WORDS = ("GetTimeoutError", "Get timed out")


def timed_out(text: str | None) -> bool:
    return bool(text) and any(word in text for word in TIMEOUT_WORDS)


def trial_failed(stage: str, run: dict[str, Any], fallback: str) -> StageResult:
    if run["out_of_time"] and (not run["trial_error"] or timed_out(run["trial_error"])):
        return out_of_time(stage, run)
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
