"""The `device` stage: one Tune trial probes the devices, compute and memory headroom; the same
trial saves the checkpoint the `checkpoint` stage follows.
"""

from __future__ import annotations

import time
from typing import Any

from ray_doctor.model import Evidence
from ray_doctor.smoke import _probes
from ray_doctor.smoke._findings import classify, finding, gib, text_evidence
from ray_doctor.smoke._model import CPU_ALLOCATION_CAP, StageResult, StageStatus
from ray_doctor.smoke.stages import Stage
from ray_doctor.smoke.stages._common import (
    TUNE_STAGE_S,
    Context,
    bundle,
    collected_values,
    never_scheduled,
    new_collector,
    not_collected,
    ray_api,
    trial_failed,
    watched,
)
from ray_doctor.smoke.stages.checkpoint import checkpoint_result, restore_checkpoint


def tune_stages(ctx: Context) -> tuple[StageResult, StageResult]:
    """One real Tune trial with the requested resources probes the devices and reports a
    checkpoint; a Ray task (no CPUs, spread to another node where there is one) restores it."""
    from ray import tune

    options = ctx.options
    api = ray_api(ctx)
    RunConfig, FailureConfig = api.tune_configs()
    collector = new_collector()
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
    run = watched(ctx, "device", tuner.fit, budget)
    if run.unscheduled is not None:
        never = never_scheduled(ctx, "device", run.unscheduled)
        skipped = StageResult(
            "checkpoint", StageStatus.SKIP, message="Not run: the smoke trial was never scheduled."
        )
        return never, skipped
    finished, results, error = run.finished, run.value, run.error
    seconds = time.monotonic() - started
    trial_error = None
    if error is not None:
        trial_error = _probes.error_text(error)
    elif finished and results is not None and len(results) and results[0].error is not None:
        trial_error = _probes.error_text(results[0].error)
    values = collected_values(collector)
    if values is None and trial_error is None:
        return not_collected("device", seconds), not_collected("checkpoint", seconds)
    values = values or {}  # the trial's own error tells what went wrong
    if finished and results is not None and len(results) and results[0].checkpoint is not None:
        values["checkpoint_restore"] = restore_checkpoint(ctx, results[0].checkpoint)
    run = {
        "seconds": seconds,
        "finished": finished,
        # Tune stops a trial at its time budget without an error: that is not a stage failure.
        "out_of_time": not finished or seconds >= budget - 1.0,
        "budget": budget,
        "storage": ctx.storage,
        "trial_error": trial_error,
    }
    return device_result(ctx, values, run), checkpoint_result(ctx, values, run)


def device_result(ctx: Context, values: dict[str, Any], run: dict[str, Any]) -> StageResult:
    device = values.get("device")
    if device is None:
        return trial_failed("device", run, "device-unavailable")
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


STAGE = Stage(
    "device",
    "devices visible, compute and memory headroom in a Tune trial",
    position=1,
    run=tune_stages,
    reports=("checkpoint",),
    api=frozenset({"tune"}),
    request=lambda options: [bundle(options.cpus_per_worker, options.gpus)],
    default=True,
    before_probes=True,  # the probes run meanwhile; gathered after the trial
    tune_driver=lambda api: True,
)
