"""The `collective` stage: an allreduce across a Ray Train worker group, each rank checked and
timed; a failure read with the ranks' Flight Recorder dumps.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from ray_doctor.model import Evidence
from ray_doctor.smoke import _flight_recorder as flight_recorder
from ray_doctor.smoke import _probes
from ray_doctor.smoke._compat import missing_ray_name
from ray_doctor.smoke._findings import classify, finding, text_evidence
from ray_doctor.smoke._model import StageResult, StageStatus
from ray_doctor.smoke.stages import Stage
from ray_doctor.smoke.stages._common import (
    TRAIN_STAGE_S,
    Context,
    api_missing,
    bundle,
    collected_values,
    never_scheduled,
    new_collector,
    not_collected,
    ray_api,
    timed_out,
    watched,
)

COLLECTIVE_TIMEOUT_S = 60  # the process group's own timeout (TorchConfig.timeout_s)


ALLREDUCE_ELEMENTS = 1 << 20  # 4 MiB of float32


ALLREDUCE_REPEATS = 5


TRAIN_ERRORS_TABLES = ("collective-timeout", "nccl-error", "port-conflict", "missing-module")


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
    trainer_resources = ray_api(ctx).trainer_resources()
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
    ray_api(ctx).require("train")
    collector = new_collector()
    trainer = _trainer(
        ctx, _probes.make_allreduce_loop(collector, ALLREDUCE_ELEMENTS, ALLREDUCE_REPEATS)
    )
    budget = ctx.budget(TRAIN_STAGE_S)
    started = time.monotonic()
    run = watched(ctx, "collective", trainer.fit, budget)
    if run.unscheduled is not None:
        return never_scheduled(ctx, "collective", run.unscheduled)
    finished, error = run.finished, run.error
    seconds = time.monotonic() - started
    squeezed = budget < TRAIN_STAGE_S  # --timeout left less than the stage's own limit
    if squeezed and (not finished or timed_out(error and _probes.error_text(error))):
        # Cut short by --timeout (seen on a busy machine): not a collective that hung.
        message = (
            f"The allreduce run did not finish in the {budget:.0f} s --timeout left it: raise "
            "--timeout."
        )
        return StageResult("collective", StageStatus.ERROR, duration_s=seconds, message=message)
    values = collected_values(collector)
    if values is None and error is None:
        return not_collected("collective", seconds)
    values = values or {}  # the run's own error tells what went wrong
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
        f"checked on every rank, {median * 1000:.1f} ms median, "
        # One rank sends nothing to another device: a bandwidth of 0 would read as a fault.
        + (f"bus bandwidth {busbw:.2f} GB/s." if world > 1 else "no link between devices tested.")
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


def _workers(options) -> list[dict[str, float]]:
    return [bundle(options.cpus_per_worker, options.gpus_per_worker)] * options.worker_count


STAGE = Stage(
    "collective",
    "allreduce across a Ray Train worker group",
    position=2,
    run=collective_stage,
    api=frozenset({"train"}),
    request=_workers,
    default=True,
    # Train V1 runs its trainer through Tune in this driver (Train V2 does not).
    tune_driver=lambda api: api is not None and api.train == "v1",
)
