"""The `checkpoint` stage: the smoke trial's checkpoint, reported through storage and restored
and checked byte by byte by a Ray task elsewhere.
"""

from __future__ import annotations

from typing import Any

from ray_doctor.model import Evidence
from ray_doctor.smoke import _probes
from ray_doctor.smoke._findings import classify, finding
from ray_doctor.smoke._model import StageResult, StageStatus
from ray_doctor.smoke.stages import Stage
from ray_doctor.smoke.stages._common import TUNE_STAGE_S, Context, out_of_time, trial_failed
from ray_doctor.storage import shown_target


def restore_checkpoint(ctx: Context, checkpoint) -> dict[str, Any]:
    import ray

    restore = ray.remote(num_cpus=0, max_retries=0, scheduling_strategy="SPREAD")(
        _probes.restore_checkpoint
    )
    try:
        return ray.get(restore.remote(checkpoint), timeout=ctx.budget(TUNE_STAGE_S))
    except Exception as exc:
        # Out of time is not a restore that failed: the stage could not finish its check.
        timed_out = isinstance(exc, ray.exceptions.GetTimeoutError)
        return {"ok": False, "error": _probes.error_text(exc), "timed_out": timed_out}


def checkpoint_result(ctx: Context, values: dict[str, Any], run: dict[str, Any]) -> StageResult:
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
        return trial_failed("checkpoint", run, "checkpoint-roundtrip")
    problem = None
    if saved and not saved.get("ok"):
        problem = f"saving or reporting the checkpoint raised {saved.get('error', '').splitlines()[-1] if saved.get('error') else '?'}"
    elif (
        (restored is None or restored.get("timed_out"))
        and not run["trial_error"]
        and (run["out_of_time"] or restored is not None)
    ):
        return out_of_time("checkpoint", run)
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


STAGE = Stage(
    "checkpoint",
    "checkpoint save, report and restore through storage",
    position=3,
    run=None,
    reported_by="device",  # the device stage's trial saves and reports the checkpoint
    default=True,
)
