"""checkpoint-unsafe (verify-checkpoint): loading the checkpoint would run code it names."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import VerifyRule


class CheckpointUnsafe(VerifyRule):
    """A checkpoint pickle references globals outside what tensors and state dicts need.

    Symptom:
        `ray-doctor verify-checkpoint` names a global such as `os.system`, `builtins.eval`,
        `subprocess.Popen` or a class from some package, in a `.pt` / `.pkl` / `.bin` file, in
        torch's `data.pkl` inside the archive, or in a file whose name claims another format.
    Likely cause:
        The file was tampered with (a pickle payload runs code the moment it is loaded with
        a full unpickler such as `torch.load` without `weights_only`), or the training code
        saved whole Python objects (a model class, a custom config object, numpy scalars) instead of state
        dicts, which ties loading to that code and makes it unverifiable.
    Evidence it uses:
        Every opcode of every pickle, read by a symbolic machine that records globals and
        calls nothing; files are identified by content, so a pickle named `.safetensors` is
        still read as a pickle. The allowlist is what `torch.load(weights_only=True)` accepts
        (tensors, storages, dtypes, `torch.Size`, `OrderedDict`, ...); torch.distributed
        checkpoint metadata classes are allowed in `.metadata`, Ray's own classes in Ray's
        bookkeeping files.
    Fix:
        Do not load the file with a full unpickler. If you trust its origin, re-save only state
        dicts (`torch.save(model.state_dict(), ...)`) or use safetensors; load with
        `torch.load(path, weights_only=True)`. If you did not write it, treat the globals it
        names as an attack.
    References:
        - https://pytorch.org/docs/stable/generated/torch.load.html
        - https://huggingface.co/docs/safetensors/index
    """

    id = "checkpoint-unsafe"
    title = "Loading the checkpoint would run code"
    example = "fixtures/checkpoints/whole_model/model.pt"
    severity = Severity.ERROR
    verify_fix = (
        "Do not load it with a full unpickler (`torch.load` without `weights_only`, or pickle). If you trust its "
        "origin, re-save state dicts only (or safetensors) and load with `weights_only=True`; if "
        "you did not write it, treat the named globals as an attack."
    )
