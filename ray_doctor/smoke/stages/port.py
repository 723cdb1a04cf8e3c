"""The `port` stage: the master port can be bound on every worker node (from the node probes)."""

from __future__ import annotations

from typing import Any

from ray_doctor.model import Evidence
from ray_doctor.smoke._findings import finding
from ray_doctor.smoke._model import StageResult, StageStatus
from ray_doctor.smoke.stages import PROBES, Stage
from ray_doctor.smoke.stages._common import Context, probe_error


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
        return probe_error("port", "The port probe did not run", unknown[0]["error"], details)
    where = ", ".join(p["node"].ip for p in checked)
    count = f"{len(checked)} worker node{'s' if len(checked) != 1 else ''}"
    message = f"Port {port} ({ctx.options.master_port_from}) can be bound on {count}: {where}."
    seconds = max((p["port"].get("seconds", 0.0) for p in checked), default=0.0)
    return StageResult("port", StageStatus.PASS, seconds, message, details=details)


STAGE = Stage(
    "port",
    "master port can be bound on every worker node",
    position=4,
    run=port_stage,
    phase=PROBES,
    default=True,
)
