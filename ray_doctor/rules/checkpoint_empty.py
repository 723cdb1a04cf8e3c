"""checkpoint-empty (verify-checkpoint): a checkpoint dir with no files."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import VerifyRule


class CheckpointEmpty(VerifyRule):
    """A checkpoint dir exists but holds no files.

    Symptom:
        A `checkpoint_*` dir is empty; restoring from it gives the training function an empty
        directory, and loading its model file fails with FileNotFoundError.
    Likely cause:
        The checkpoint was reported before its files were written (writing into the dir
        after `tune.report` / `ray.train.report`), the upload failed half-way, or files were
        deleted by hand.
    Evidence it uses:
        A listing of the checkpoint dir (a few levels deep).
    Fix:
        Write every file into a temporary dir first and report
        `Checkpoint.from_directory(tmpdir)` only when it is complete; delete the empty dir so a
        restore uses the previous checkpoint.
    References:
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-trial-checkpoints.html
    """

    id = "checkpoint-empty"
    title = "Empty checkpoint dir"
    severity = Severity.ERROR
    example_note = (
        "git cannot hold an empty directory, so no example is bundled; "
        "tests/checkpoint/test_verify_integrity.py makes one."
    )
    verify_fix = (
        "Write checkpoint files to a temporary dir and report `Checkpoint.from_directory(tmp)` "
        "only when complete; remove the empty dir so a restore uses the previous checkpoint."
    )
