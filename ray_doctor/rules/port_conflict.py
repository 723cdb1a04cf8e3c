"""port-conflict: a process could not listen on a port another process holds."""

from __future__ import annotations

import re

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    first_group,
    mentions,
    signatures,
    wording,
)
from ray_doctor.rules.storage_unreachable import OUT_OF_FDS

# Ray names no reason (gRPC logged it just before), but the port was fixed (a port of 0 means
# any free one) and the message itself sends the user to look for its holder.
WSAEACCES_LABEL = "WSAEACCES (Windows)"
GRPC_LABEL = "Ray gRPC server could not bind its port"
ML_AGENTS_LABEL = "ML-Agents worker port in use"
LIGHTGBM_LABEL = "LightGBM bind failed"
WORKER_RANGE_LABEL = "Ray worker port range used up"
IN_USE = signatures(
    wording(
        "EADDRINUSE",
        r"EADDRINUSE|[Aa]ddress already in use",
        "the OS (strerror of EADDRINUSE) through torch TCPStore / gloo, gRPC, aiohttp, Ray",
        "any (torch 1.x prints a bare 'RuntimeError: Address already in use')",
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
        "already in use).",
    ),
    wording(
        "errno 98",
        r"[Ee]rrno[:=]? ?98\b|code: -98\b",
        "Linux errno 98 (EADDRINUSE) in torch c10d socket errors, Python OSError and C++ "
        "servers' bind failures (DGL's tcp_socket.cc: 'Failed bind on IP:PORT ,errno=98')",
        "any",
        "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8265)",
    ),
    wording(
        "EADDRINUSE (macOS)",
        r"\[Errno 48\]",
        "macOS / BSD errno 48 (EADDRINUSE) in Python OSError",
        "any",
        "OSError: [Errno 48] Address already in use",
    ),
    wording(
        "WSAEADDRINUSE (Windows)",
        r"WinError 10048|error:? 10048\b|Only one usage of each socket address",
        "Windows sockets error 10048 (WSAEADDRINUSE) through Python and torch c10d",
        "any",
        "OSError: [WinError 10048] Only one usage of each socket address (protocol/network "
        "address/port) is normally permitted",
    ),
    # WSAEACCES: Windows refuses the bind when a process holds the port exclusively or the
    # port lies in a range Windows reserved for itself (Hyper-V / WinNAT excluded ranges).
    wording(
        WSAEACCES_LABEL,
        r"WinError 10013\b",
        "Windows sockets error 10013 (WSAEACCES) through Python's socket.bind",
        "any",
        "OSError: [WinError 10013] An attempt was made to access a socket in a way forbidden by "
        "its access permissions",
    ),
    # ML-Agents binds base_port + worker_id: two envs with one worker id (every Tune trial's
    # or RLlib rollout worker's copy of the same config) want the same port.
    wording(
        ML_AGENTS_LABEL,
        r"Couldn't start socket communication because worker number \d+ is still in use",
        "Unity ML-Agents UnityWorkerInUseException (mlagents_envs/exception.py; its Unreal copy)",
        "ML-Agents 0.x-1.x",
        "mlagents_envs.exception.UnityWorkerInUseException: Couldn't start socket communication "
        "because worker number 1 is still in use. You may need to manually close a previously "
        "opened environment or use a different worker number.",
    ),
    wording(
        "Ray port already used",
        r"Ray component \w+ is trying to use a port number \d+ that is used by other components",
        "Ray node start-up port check (python/ray/_private/node.py)",
        "Ray 1.3-2.60",
        "ValueError: Ray component worker_ports is trying to use a port number 53058 that is used "
        "by other components.",
    ),
    wording(
        "Ray dashboard port taken",
        r"Failed to bind to \S+:(\d+) because it's already occupied",
        "Ray's start-up check of the dashboard port (python/ray/_private/services.py, on "
        "EADDRINUSE)",
        "Ray 1.13-2.60",
        "ValueError: Failed to bind to 0.0.0.0:8265 because it's already occupied. You can use "
        "`ray start --dashboard-port ...` or `ray.init(dashboard_port=...)` to select a "
        "different port.",
    ),
    wording(
        "Ray port taken (0.x-1.x)",
        r"The given dashboard port \d+ is already in use|"
        r"Port (\d+) specified by caller already in use|"
        r"couldn't be started due to the port conflict",
        "Ray 0.8-1.0's dashboard port check (services.py), its gRPC servers' fatal check "
        "(src/ray/rpc/grpc_server.cc, 0.7-1.0) and the raylet's agent manager (agent_manager.cc, "
        "1.13)",
        "Ray 0.7-1.13",
        "Check failed: PortNotInUse(port_) Port 46317 specified by caller already in use. Try "
        "passing node_manager_port=... into ray.init() to pick a specific port",
    ),
    wording(
        LIGHTGBM_LABEL,
        r"Binding port (\d+) failed",
        "LightGBM's distributed network (src/network/linkers_socket.cpp, Linkers::TryBind: "
        "Log::Fatal when bind() fails), through lightgbm.dask and lightgbm_ray",
        "LightGBM 2.x-4.x",
        "lightgbm.basic.LightGBMError: Binding port 12402 failed",
    ),
    wording(
        GRPC_LABEL,
        r"Failed to start the grpc server\. The specified port is [1-9]\d*",
        "Ray's gRPC servers (raylet, GCS, object manager, core worker: src/ray/rpc/grpc_server.cc), "
        "a fatal check after the bind failed",
        "Ray 1.x-2.60",
        "Check failed: server_ Failed to start the grpc server. The specified port is 8076. This "
        "means that Ray's core components will not be able to function correctly. Try running "
        "lsof -i :8076 to check if there are other processes listening to the port.",
    ),
)
# The raylet gives each worker a port of --min-worker-port..--max-worker-port that passes a
# bind check (src/ray/raylet/worker_pool.cc, GetNextFreePort); none left fails the worker's
# registration. Out of file descriptors, every bind check fails and the range only reads as
# used up (see `excluded`).
WORKER_RANGE = signatures(
    wording(
        WORKER_RANGE_LABEL,
        r"No available ports\. Please specify a wider port range",
        "the raylet's worker pool (src/ray/raylet/worker_pool.cc, GetNextFreePort), in the "
        "worker's 'Failed to register worker ... to Raylet'",
        "Ray 1.x-2.60",
        "core_worker.cc:137: Failed to register worker a20a041a to Raylet. Invalid: Invalid: No "
        "available ports. Please specify a wider port range using --min-worker-port and "
        "--max-worker-port.",
    ),
)
PORT = re.compile(r"port(?::? ?| is )(\d{2,5})\b|:(\d{4,5})\b")


class PortConflict(SignatureRule):
    """A worker or the driver could not bind its port: the address is already in use.

    Symptom:
        "Address already in use", EADDRINUSE, errno 98, or torch's `DistNetworkError: The
        server socket has failed to listen on any local network address …` when a process
        group or a Ray component starts; Ray's own "Failed to start the grpc server. The
        specified port is N" when a raylet, the GCS or a worker cannot bind its fixed port.
    Likely cause:
        A process from an earlier run still holds the port (a stale training process or Ray
        instance), two jobs on one node chose the same fixed `MASTER_PORT`, or a service on the
        node already uses a port Ray or torch wants.
    Evidence it uses:
        The bind error in error.txt, the driver log or the Ray logs, and the port number when
        the text names it.
    Fix:
        Find the holder: `ss -ltnp | grep :PORT` (or `lsof -i :PORT`) and stop stale processes
        (`ray stop` for old Ray instances). Do not hard-code `MASTER_PORT`; let Ray Train pick a
        free one, or give each job its own. For Ray itself, pick ports with `ray start --port`,
        `--node-manager-port`, `--min-worker-port/--max-worker-port`.
    References:
        - https://docs.ray.io/en/latest/ray-core/configure.html#ports-configurations
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "port-conflict"
    title = "Port already in use"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    example = "fixtures/tune_port_conflict"
    signatures = IN_USE + WORKER_RANGE

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # A raylet out of file descriptors cannot open the socket its port check binds: the
        # worker range reads as used up while its ports are free (a bind error is still one).
        return mentions(experiment, failure, OUT_OF_FDS) and not mentions(
            experiment, failure, IN_USE
        )

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        port = first_group(hit, PORT)
        why = (
            "Ray's gRPC server failed to start there, most likely because another process "
            "holds the port"
            if hit.signature.label == GRPC_LABEL
            else "Windows refused the port: another process holds it, or it lies in a range "
            "Windows reserved"
            if hit.signature.label == WSAEACCES_LABEL
            else "LightGBM could not bind it, most likely because another process (a fit that "
            "has not let go of it, another job) holds the port"
            if hit.signature.label == LIGHTGBM_LABEL
            else "the address is already in use"
        )
        message = (
            f"{subject_name(experiment, hit.trial)} could not listen on "
            f"{'port ' + port if port else 'its port'}: {why} ({hit.evidence.excerpt})."
        )
        where = f":{port}" if port else ":PORT"
        if hit.signature.label == WORKER_RANGE_LABEL:
            message = (
                f"{subject_name(experiment, hit.trial)} could not start a worker: the raylet has "
                "no free port left in its worker port range (its workers, or other processes, "
                f"hold them all) ({hit.evidence.excerpt})."
            )
            return message, (
                "Widen the range, or leave it unset (`ray start --min-worker-port 10002 "
                "--max-worker-port 19999` is the default: one port per worker process), or run "
                "fewer workers per node; `ss -ltnp` shows what holds ports in it."
            )
        if hit.signature.label == ML_AGENTS_LABEL:
            return message, (
                "Each environment listens on `base_port + worker_id`: give every copy its own "
                "`worker_id` (in RLlib, from `env_config.worker_index` and `vector_index`; across "
                "Tune trials, a base port per trial) and close environments you no longer use "
                "(`env.close()`)."
            )
        if hit.signature.label == LIGHTGBM_LABEL:
            return message, (
                f"See what holds it (`ss -ltnp | grep {where}`). Each LightGBM worker listens on "
                "its own port: do not pin `local_listen_port` or `machines` (lightgbm.dask "
                "finds free ports from 3.2 on; in lightgbm_ray leave the default), or give "
                "every concurrent job its own range."
            )
        if hit.signature.label == WSAEACCES_LABEL:
            return message, (
                f"See what holds it (`netstat -ano | findstr {where}`) and whether Windows "
                "reserved it (`netsh interface ipv4 show excludedportrange protocol=tcp`, ranges "
                "that Hyper-V and WSL take); use a port outside those ranges, or stop what holds "
                "it."
            )
        fix = (
            f"Find what holds it on that node (`ss -ltnp | grep {where}` or `lsof -i {where}`) and "
            "stop stale processes (`ray stop` for an old Ray instance). Do not hard-code "
            "`MASTER_PORT`: let Ray Train pick a free port, or give each job its own."
        )
        return message, fix
