"""cluster-unreachable (smoke): the Ray cluster to test could not be joined or started."""

from __future__ import annotations

from ray_doctor.findings import Severity
from ray_doctor.rules._base import SmokeRule


class ClusterUnreachable(SmokeRule):
    """`ray-doctor smoke` could not join the cluster at `--address` / `RAY_ADDRESS`, or could
    not start a local Ray instance.

    Symptom:
        Nothing listens at the address (connection refused or timed out), something answers
        that is not a Ray GCS, `ray.init` fails (a Ray version mismatch between the driver
        and the cluster, an authentication token the driver lacks), or a local `ray.init`
        fails to start its processes.
    Likely cause:
        The wrong host or port (the GCS port is 6379 unless `ray start --port` said
        otherwise; `ray://` addresses go to the Ray Client server on 10001), a head node that
        is down or restarting, a firewall between this machine and the head, or a driver whose
        Ray or Python version differs from the cluster's.
    Evidence it uses:
        The TCP connection attempt smoke makes before `ray.init`, and the error `ray.init`
        raised.
    Fix:
        Check the head node is up (`ray status` on it) and which address it printed at
        `ray start --head`; from this machine, `nc -zv HOST PORT`. Use the same Ray and Python
        versions as the cluster. For Ray Client use `ray://HOST:10001`.
    References:
        - https://docs.ray.io/en/latest/ray-core/starting-ray.html
        - https://docs.ray.io/en/latest/cluster/running-applications/job-submission/ray-client.html
    """

    id = "cluster-unreachable"
    title = "Could not join or start the Ray cluster"
    severity = Severity.ERROR
    smoke_example = "ray-doctor smoke --address 127.0.0.1:1"
