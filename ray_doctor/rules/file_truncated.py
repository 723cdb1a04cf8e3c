"""file-truncated: files Ray writes whole were cut off mid-write (a killed writer, a full disk)."""

from __future__ import annotations

from collections.abc import Iterator

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, ScanError
from ray_doctor.rules._base import Precedence, Rule
from ray_doctor.rules.disk_full import FULL

BLOCK = 4096  # a write that stopped on a page / block boundary: the device had no next block
SHOWN = 4


def _what(error: ScanError) -> str:
    name = error.path.replace("\\", "/").rsplit("/", 1)[-1]
    where = error.path.replace("\\", "/").rsplit("/", 2)
    owner = f" of {where[-2]}" if len(where) >= 2 and name in ("params.json", "result.json") else ""
    if error.cut_off_at == 0:
        return f"{name}{owner} is empty"
    at = f"{error.cut_off_at:,}"
    if name == "result.json":
        return f"{name}{owner} ends mid-row at byte {at}"
    aligned = " (a multiple of 4,096: the write stopped at a block boundary)"
    return f"{name}{owner} ends at byte {at}{aligned if error.cut_off_at % BLOCK == 0 else ''}"


class FileTruncated(Rule):
    """Files Ray writes whole were cut off mid-write: their writer was killed or the storage filled up.

    Symptom:
        `experiment_state-*.json` (or Train V2's `checkpoint_manager_snapshot.json`) does not
        parse and stops where no JSON can end, `params.json` is empty, a `result.json` row has
        no end. The run may look like one UNKNOWN trial with nothing to say.
    Likely cause:
        The storage volume filled up (ENOSPC), or the process writing the file was killed
        mid-write (OOM killer, preemption, `kill -9`). A file that stops on a 4,096-byte
        boundary ran out of blocks. Ray writes these files in place, so a failed write leaves
        the cut-off copy behind.
    Evidence it uses:
        Each JSON document Ray writes whole, checked for an end: empty, or its last byte is not
        `}` / `]`; result.json's last row without its newline; the file's size (where it ends);
        a "No space left on device" in the run's errors or logs, when there is one.
    Fix:
        Check the free space of the storage volume (`df -h <storage_path>`) and free or grow it;
        look for a kill at the time the file stops (`dmesg`, the node's events). Then resume:
        `Tuner.restore` uses the newest experiment_state that still parses (older ones stay
        beside it), and trial dirs keep their checkpoints.
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-storage.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-fault-tolerance.html
    """

    id = "file-truncated"
    title = "Run files cut off mid-write"
    severity = Severity.ERROR
    specificity = Precedence.CODE_OR_DATA
    example = "fixtures/tune_storage_full"

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        cut = [e for e in experiment.errors if e.cut_off_at is not None]
        if not cut:
            return
        described = "; ".join(_what(e) for e in cut[:SHOWN])
        if len(cut) > SHOWN:
            described += f"; and {len(cut) - SHOWN} more"
        message = f"{len(cut)} file(s) Ray writes whole end mid-write: {described}."
        full = self._disk_full_line(experiment)
        if full is not None:
            message += " The run's own errors say the disk was full (No space left on device)."
        else:
            message += (
                " Their writer was killed mid-write or the storage ran out of space; nothing "
                "here says which."
            )
        evidence = [Evidence(e.path, None, e.reason) for e in cut[:SHOWN]]
        if full is not None:
            evidence.append(full)
        fix = (
            "Check the storage volume's free space (`df -h <storage_path>`) and for a kill at "
            "the time the files stop (`dmesg`). Then resume: `Tuner.restore` takes the newest "
            "experiment_state that still parses, and the trial dirs keep their checkpoints."
        )
        yield self.finding(
            experiment, message, fix, evidence, subject=f"truncated:{experiment.path}"
        )

    @staticmethod
    def _disk_full_line(experiment: Experiment) -> Evidence | None:
        for trial in experiment.trials:
            for failure in trial.failures:
                for sig in FULL:
                    found = failure.evidence_for(sig.pattern)
                    if found:
                        return found[0]
        for event in experiment.events:
            if any(sig.pattern.search(event.line) for sig in FULL):
                return event.source
        return None
