"""The `environment` stage: a fingerprint of every node (from the node probes) and the Ray API
path smoke took.
"""

from __future__ import annotations

from typing import Any

from ray_doctor.smoke import _probes
from ray_doctor.smoke._findings import gib
from ray_doctor.smoke._model import StageResult, StageStatus
from ray_doctor.smoke.stages import PROBES, Stage
from ray_doctor.smoke.stages._common import Context, probe_error


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
        error = probe_error("environment", "No node answered the probe", failed[0]["error"], {})
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


def run(ctx: Context, probes: list[dict[str, Any]]) -> StageResult:
    result, facts = environment_stage(ctx, probes)
    ctx.emit("environment", environment=facts)
    return result


STAGE = Stage(
    "environment",
    "environment fingerprint of every node",
    position=6,
    run=run,
    phase=PROBES,
    default=True,
    with_relaunch=True,
)
