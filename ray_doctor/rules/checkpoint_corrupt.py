"""checkpoint-corrupt: a restore failed on a damaged checkpoint file."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import resume_hint, subject_name
from ray_doctor.rules._signature import Hit, SignatureRule, first_group, signatures, wording

CHECKPOINT_PATH = re.compile(r"(checkpoint_[\w.:-]+)")

# Ray's own readers of a trial's pickled error (ray/tune/experiment/trial.py, result_grid.py),
# and torch.distributed's of an object another rank sent (torch/distributed/distributed_c10d.py:
# `_tensor_to_object` unpickles from memory for broadcast_object_list and the like): neither
# reads a checkpoint.
NOT_CHECKPOINT_READERS = {
    "get_pickled_error",
    "_populate_exception",
    "_tensor_to_object",
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
    "recv_object_list",
}
# `_tensor_to_object`'s own line, for a traceback whose frame headers a paste lost.
OBJECT_FROM_RANK = "_unpickler(io.BytesIO(buf)).load()"
# The opcodes of pickle protocols 0-5 (`ord(op.code) for op in pickletools.opcodes`): torch's
# weights_only unpickler names any other byte it meets as an "Unsupported operand", which
# means the file is no pickle at that point, while an opcode it does not allow is a refusal.
PICKLE_OPCODES = frozenset(range(128, 153)) | {
    *(40, 41, 46, 48, 49, 50, 66, 67, 70, 71, 73, 74, 75, 76, 77, 78, 80, 81, 82, 83, 84, 85, 86),
    *(88, 93, 97, 98, 99, 100, 101, 103, 104, 105, 106, 108, 111, 112, 113, 114, 115, 116, 117),
    125,
}
NOT_OPCODE = "|".join(str(byte) for byte in range(256) if byte not in PICKLE_OPCODES)
TORCH_ZIP = "torch zip reader (caffe2/serialize/inline_container.cc)"
PARTIAL_HF = "checkpoint folder written in part"
CORRUPT = signatures(
    wording(
        "truncated torch zip",
        r"PytorchStreamReader failed reading zip archive|failed finding central directory",
        TORCH_ZIP,
        "torch 1.6-2.13",
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory",
    ),
    wording(
        "torch zip record missing",
        r"PytorchStreamReader failed (?:locating|reading) file|file not found: archive/",
        TORCH_ZIP,
        "torch 1.6-2.13",
        "RuntimeError: PytorchStreamReader failed reading file data/0: invalid header or archive "
        "is corrupted",
    ),
    wording(
        "pickle cut short",
        r"EOFError: Ran out of input|Ran out of input|unexpected EOF, expected \d+ more bytes",
        "CPython pickle / torch legacy loader (torch/serialization.py)",
        "Python 3; torch 0.4-2.13",
        "EOFError: Ran out of input",
    ),
    wording(
        "pickle garbage",
        r"(?<!cPickle\.)UnpicklingError: (?:invalid load key|pickle data was truncated|"
        r"unpickling stack underflow)",
        "CPython pickle (Python 3; Python 2's cPickle reading a newer file is a version issue)",
        "Python 3",
        "_pickle.UnpicklingError: invalid load key, 'v'.",
    ),
    wording(
        "TensorFlow checkpoint checksum",
        r"Checksum does not match: stored \d+ vs\. calculated on the restored bytes \d+",
        "TensorFlow's tensor bundle reader (tensorflow/core/util/tensor_bundle/tensor_bundle.cc)",
        "TensorFlow 1.x-2.x",
        "DataLossError: Checksum does not match: stored 189470084 vs. calculated on the restored "
        "bytes 1055297358",
    ),
    wording(
        "legacy torch file damaged",
        r"Invalid magic number; corrupt file\?|"
        # (to "got": a paste's markdown can glue an underscore to it, yolact #235)
        r"storage has wrong (?:byte )?size: expected \d+ got",
        "torch.load of a pre-1.6 (non-zip) file (torch/serialization.py _legacy_load; "
        "torch/csrc serialization)",
        "torch 0.4-2.13 (its older wording: 'storage has wrong size')",
        "RuntimeError: Invalid magic number; corrupt file?",
    ),
    wording(
        "TorchScript archive damaged",
        r"Unexpected end of pickler archive|Expected PROTO opcode at the start of pickle archive|"
        r"file in archive is not in a subdirectory",
        "torch's C++ readers (torch/csrc/jit/serialization/unpickler.cpp, caffe2/serialize/"
        "inline_container.cc): torch.jit.load, torch::load, a zip torch.save did not write",
        "torch 1.x-2.13",
        "RuntimeError: Unexpected end of pickler archive.",
    ),
    wording(
        "not a pickle (weights_only)",
        rf"Unsupported operand (?:{NOT_OPCODE})\b",
        "torch's weights_only unpickler (torch/_weights_only_unpickler.py) meeting a byte that "
        "is no pickle opcode",
        "torch 1.13-2.13",
        "_pickle.UnpicklingError: Weights only load failed. ... Please file an issue with the "
        "following so that we can make `weights_only=True` compatible with your use case: "
        "WeightsUnpickler error: Unsupported operand 10",
    ),
    wording(
        "safetensors header",
        r"SafetensorError: Error while deserializing header|HeaderTooLarge|HeaderTooSmall|"
        r"InvalidHeaderDeserialization|MetadataIncompleteBuffer",
        "safetensors (safetensors/src/tensor.rs)",
        "safetensors 0.3-0.5",
        "safetensors_rust.SafetensorError: Error while deserializing header: "
        "MetadataIncompleteBuffer",
    ),
    # transformers' Trainer resumes from the newest checkpoint-N folder (get_last_checkpoint)
    # and reads trainer_state.json after the weights; it writes that file after the weights
    # too, so a job stopped while saving leaves a folder without it (fms-hf-tuning #432,
    # transformers #35534).
    wording(
        PARTIAL_HF,
        r"No such file or directory: '[^'\n]*?(checkpoint-\d+)/trainer_state\.json'",
        "transformers Trainer.train resuming (trainer.py: TrainerState.load_from_json after the weights)",
        "transformers 4.x",
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'/cos1/output/tiny-llama/checkpoint-25/trainer_state.json'",
    ),
    wording(
        "zip CRC",
        r"Bad CRC-32|BadZipFile|CRC check failed",
        "CPython zipfile, torch zip reader",
        "any",
        "zipfile.BadZipFile: Bad CRC-32 for file 'archive/data/0'",
    ),
)


# What the first bytes say when the file is not a checkpoint at all: safetensors reads a
# header length above its 100 MB cap, pickle meets 'v' (a git-lfs pointer: "version
# https://git-lfs...") or '<' (an HTML page a download saved in place of the weights).
NOT_A_CHECKPOINT = re.compile(
    r"HeaderTooLarge|invalid load key, '[v<]'|file in archive is not in a subdirectory|"
    r"Expected PROTO opcode at the start of pickle archive"
)


class CheckpointCorrupt(SignatureRule):
    """A trial failed while restoring from a damaged checkpoint file.

    Symptom:
        A retry or a resume fails right away with "PytorchStreamReader failed reading zip
        archive: failed finding central directory", `EOFError: Ran out of input`,
        `UnpicklingError: invalid load key`, a safetensors header error or a zip CRC error;
        every further retry fails the same way.
    Likely cause:
        The checkpoint was cut short or damaged while it was written: the node died, the disk
        filled up, or a sync copied a file that was still being written. Tune keeps restoring
        the newest checkpoint, so retries cannot get past it. When the first bytes are of
        another format (safetensors' HeaderTooLarge, pickle's "invalid load key, 'v'" or
        "'<'"), the file is most often no checkpoint at all: a git-lfs pointer or an HTML page
        saved in place of the weights, or another file passed as the path.
    Evidence it uses:
        In `inspect`: the error text of the trial's last failure (error.txt, driver or worker
        logs) and the checkpoint dir it names, if any; a `weights_only` refusal ("Weights only
        load failed") is not corruption and does not fire, unless the byte it names is no
        pickle opcode at all ("Unsupported operand 10": the file is no pickle there). In `verify-checkpoint`: the file
        itself: an empty or truncated file, a missing zip central directory, a CRC-32 mismatch
        in any zip member (every byte is read, which torch.load does not do), a pickle that
        does not parse, tensor storages missing from the archive or of the wrong size,
        safetensors headers whose offsets do not tile the data, DCP `.metadata` entries
        pointing at missing shards or past their end, and a git-lfs pointer or HTML page where
        the weights should be.
    Fix:
        Check the checkpoint with `ray-doctor verify-checkpoint`, then move the damaged
        checkpoint dir aside so the restore uses the previous one, and resume. Write
        checkpoints to a temporary dir and report them only when complete (the
        `tune.report(checkpoint=Checkpoint.from_directory(tmp))` pattern), and keep at least
        two (`CheckpointConfig(num_to_keep=2)` or more).
    References:
        - https://docs.ray.io/en/latest/tune/tutorials/tune-trial-checkpoints.html
        - https://docs.ray.io/en/latest/train/user-guides/checkpoints.html
    """

    id = "checkpoint-corrupt"
    title = "Checkpoint is damaged"
    severity = Severity.ERROR
    commands = ("inspect", "verify-checkpoint")
    verify_fix = (
        "Do not restore from this checkpoint: move it aside so the previous one is used (check "
        "them with `ray-doctor verify-checkpoint --all TRIAL_DIR`). Write checkpoints to a "
        "temporary dir, report them only when complete, and keep at least two."
    )
    example = "fixtures/tune_corrupt_checkpoint"
    signatures = CORRUPT

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # Ray itself unpickling a trial's error.pkl (cut off when the disk filled up), or
        # torch.distributed an object from another rank, is not a checkpoint: the frame says.
        if failure is None:
            return False
        return OBJECT_FROM_RANK in failure.joined or any(
            frame.function in NOT_CHECKPOINT_READERS for frame in failure.frames
        )

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        named = first_group(hit, CHECKPOINT_PATH)
        trial = hit.trial
        candidate = named
        if candidate is None and trial is not None and trial.last_checkpoint is not None:
            candidate = trial.last_checkpoint.name
        if NOT_A_CHECKPOINT.search(hit.evidence.excerpt):
            return self._not_a_checkpoint(experiment, hit)
        if hit.signature.label == PARTIAL_HF:
            return self._partial_folder(experiment, hit)
        message = (
            f"{subject_name(experiment, trial)} failed to restore from a damaged checkpoint "
            f"({hit.signature.label}: {hit.evidence.excerpt})"
        )
        if candidate:
            message += f"; the checkpoint it restores from is {candidate}"
        if trial is not None and len(trial.failures) > 1:
            message += (
                f", after {len(trial.failures) - 1} earlier failure(s) that led to the restore"
            )
        message += "."
        target = f" `{candidate}`" if candidate else ""
        fix = (
            f"Check it with `ray-doctor verify-checkpoint`, move the damaged checkpoint dir{target} "
            f"aside so the previous one is used, then {resume_hint(experiment)}. Write checkpoints "
            "to a temporary dir and report them only when complete, and keep at least two "
            "(`CheckpointConfig(num_to_keep=2)`)."
        )
        return message, fix

    @staticmethod
    def _partial_folder(experiment: Experiment, hit: Hit) -> tuple[str, str]:
        folder = hit.match.group(1)
        message = (
            f"{subject_name(experiment, hit.trial)} resumed from {folder}, a checkpoint folder "
            "written only in part: it has no trainer_state.json, which the Trainer writes after "
            "the weights (a job stopped or killed while saving leaves such a folder)."
        )
        fix = (
            f"Move {folder} aside so the resume picks the previous complete checkpoint (or pass "
            "`resume_from_checkpoint=` a folder that has trainer_state.json); give the job time "
            "to finish a save before it is stopped, and keep `save_total_limit` at 2 or more."
        )
        return message, fix

    @staticmethod
    def _not_a_checkpoint(experiment: Experiment, hit: Hit) -> tuple[str, str]:
        message = (
            f"{subject_name(experiment, hit.trial)} could not load a checkpoint: the file's first "
            f"bytes are not that format's ({hit.evidence.excerpt}). It is most often not a "
            "checkpoint at all: a git-lfs pointer or an HTML page saved in place of the "
            "weights, or another file passed as the checkpoint path."
        )
        fix = (
            "Look at the file's first bytes (`head -c 200 FILE`): `version https://git-lfs` "
            "means `git lfs pull` was not run, `<html` a download that failed; download it "
            "again, and check the path names the checkpoint (a `.bin` pickle needs "
            "`torch.load`, not `safetensors`). `ray-doctor verify-checkpoint FILE` says what "
            "the file is."
        )
        return message, fix
