"""snapshot-dangling (verify-checkpoint --all): records name a checkpoint dir that is gone."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import VerifyRule


class SnapshotDangling(VerifyRule):
    """Ray's records name a checkpoint dir that is not on storage.

    Symptom:
        Re-running a Train V2 run with the same name fails with "The run snapshot contains a
        reference to a checkpoint that does not exist anymore"; a Tune trial's last reported
        checkpoint (`checkpoint_dir_name` in result.json) is missing.
    Likely cause:
        Checkpoint dirs deleted by hand or by a cleanup job, an upload that never finished, or
        storage that is not shared between the nodes.
    Evidence it uses:
        `checkpoint_manager_snapshot.json` (`checkpoint_results`, `latest_checkpoint_result`)
        and result.json's last `checkpoint_dir_name`, against a listing of the run dir.
    Fix:
        Put the missing dir back if a copy exists; otherwise start a new run with a new
        `RunConfig(name=...)` (passing a good checkpoint to resume from), and let
        `CheckpointConfig(num_to_keep=...)` delete checkpoints.
    References:
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
        - https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html
    """

    id = "snapshot-dangling"
    title = "Recorded checkpoint missing from storage"
    example = "fixtures/checkpoints/train_v2_dangling"
    example_args = ("--all",)
    severity = Severity.ERROR
    verify_fix = (
        "Restore the missing checkpoint dir if a copy exists; otherwise start a new run with a "
        "new `RunConfig(name=...)` and let `CheckpointConfig(num_to_keep=...)` delete checkpoints."
    )
