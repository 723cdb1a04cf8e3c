"""checkpoint-roundtrip (smoke): a checkpoint did not come back from storage as it was saved."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule


class CheckpointRoundtrip(SmokeRule):
    """A checkpoint saved and reported from a real Tune trial did not come back whole when
    another process restored it from storage.

    Symptom:
        The trial saves a checkpoint (1 MiB of random bytes, a torch tensor file and a manifest
        of their hashes) and reports it with `tune.report`, which uploads it to the storage
        path; a Ray task (spread to another node where there is one) restores it with Ray's
        `Checkpoint.as_directory()`. Here saving or reporting raised, the trial reported no
        checkpoint, the restore raised, files were missing, or their hashes differ from the
        manifest.
    Likely cause:
        Storage that does not keep what was written (a filesystem that is not shared between
        nodes, so a process on another node finds nothing; an eventually consistent
        or size-limited object store; a full disk), or a `storage_path` the workers cannot read
        although the driver can.
    Evidence it uses:
        The manifest written with the checkpoint, the hashes and file list the restoring task
        saw, which node wrote and which restored it, and the errors raised.
    Fix:
        Use a `storage_path` every node can read and write, a cloud URI (`s3://…`, `gs://…`) or
        a shared NFS mount, not a local path of the head node. Check quotas and free space.
        Re-run `ray-doctor smoke --storage-path URI` until this stage passes.
    References:
        - https://docs.ray.io/en/latest/train/user-guides/persistent-storage.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-storage.html
    """

    id = "checkpoint-roundtrip"
    title = "Checkpoint did not survive save, report and restore"
    severity = Severity.ERROR
    example_note = (
        "storage that loses or alters bytes cannot be made on one machine; "
        "tests/rules/test_checkpoint_roundtrip.py writes a real checkpoint with the probe, "
        "flips a byte, and reads it back with the probe"
    )
