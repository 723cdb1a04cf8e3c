"""collective-failed (smoke): an allreduce across the Train worker group failed or was wrong."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule


class CollectiveFailed(SmokeRule):
    """A real Ray Train `TorchTrainer` could not complete a checked allreduce: the worker group
    or its process group failed to form, a rank raised, or a rank got the wrong sum.

    Symptom:
        Each rank allreduces `rank + 1` and must get `1 + 2 + … + world_size`; here a rank
        got another value, or the run failed with an error that is neither a collective
        timeout (see `collective-timeout`) nor an NCCL error (see `nccl-error`), e.g. the
        process group could not be set up.
    Likely cause:
        Ranks that cannot reach each other over the interface the backend picked (set
        `NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME`), mismatched torch builds across nodes, a
        faulty interconnect or GPU (wrong sums), or a worker that died while joining.
    Evidence it uses:
        What every rank pushed back (backend, device, node, value, timing) and the error the
        run raised.
    Fix:
        Run the same torch build everywhere (`ray-doctor smoke` lists it per node in its
        environment stage), pin the network interface for the backend, and check the rank
        that failed first: its node's logs under `/tmp/ray/session_latest/logs`. Wrong sums on
        GPUs point at hardware: run `nvidia-smi -q` and DCGM diagnostics on that node.
    References:
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
        - https://pytorch.org/docs/stable/distributed.html
    """

    id = "collective-failed"
    title = "Allreduce across the worker group failed"
    severity = Severity.ERROR
    example_note = (
        "a wrong allreduce sum needs faulty hardware; tests/rules/test_collective_failed.py "
        "edits one rank's value in a real CPU smoke run and classifies real error texts"
    )
