"""Code that runs inside Ray workers: the Tune trial, the Train loop, the per-node probe.

The runner ships this module to the workers *by value* (Ray's serializer,
`register_pickle_by_value`), so the nodes of a user's cluster need Ray and torch but not
ray-doctor. Hence the rules of this file: it imports nothing from ray_doctor, and imports
ray, torch and psutil inside the functions that need them. Probes never raise for what they
test: a failed check is a value in the result (with the exception's text), so one broken
device does not hide what the others show.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import socket
import sys
import time
import traceback
from typing import Any

MATMUL_N = 1024  # a 1024 x 1024 matmul: ~2 GFLOP, milliseconds on any device
TIMED_MATMULS = 3
CHECKPOINT_PAYLOAD_BYTES = 1 << 20
CHECKPOINT_FILES = ("payload.bin", "tensor.pt", "manifest.json")
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CUDA_", "MASTER_", "OMP_NUM_THREADS")


class Collector:
    """Gathers what probes measured; a Ray actor (num_cpus=0) made by the runner.

    Workers push here rather than through Tune / Train results because a probe that is
    killed (OOM) or a Train run that fails still leaves its last pushed values behind.
    """

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def put(self, key: str, value: Any) -> None:
        self.values[key] = value

    def get(self) -> dict[str, Any]:
        return self.values


def error_text(exc: BaseException) -> str:
    """`Type: message` plus the last traceback lines: what a finding quotes."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(lines[-6:]).strip()


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a chain: Ray wraps the telling one (an auth error) in a
    generic ConnectionError."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _node_ip() -> str | None:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return None


# ----------------------------------------------------------------------------- fingerprint


def _nvidia_smi() -> dict[str, Any]:
    """Driver version and GPUs as nvidia-smi sees them (it ignores CUDA_VISIBLE_DEVICES)."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return {"available": False}
    query = "index,name,uuid,memory.total,memory.used,driver_version"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": True, "error": str(exc)}
    if out.returncode != 0:
        return {"available": True, "error": (out.stderr or out.stdout).strip()[:500]}
    gpus, driver = [], None
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6:
            continue
        driver = parts[5]
        gpus.append(
            {
                "index": int(parts[0]),
                "name": parts[1],
                "uuid": parts[2],
                "memory_total_bytes": int(float(parts[3]) * 2**20),
                "memory_used_bytes": int(float(parts[4]) * 2**20),
            }
        )
    return {"available": True, "driver_version": driver, "gpus": gpus}


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:
        return {"version": None, "error": error_text(exc)}
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "nccl": None,
        "gloo": bool(torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    }
    with contextlib.suppress(Exception):
        facts["cudnn"] = torch.backends.cudnn.version()
    if torch.version.cuda:
        try:
            version = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else version
        except Exception:
            pass
    return facts


def fingerprint() -> dict[str, Any]:
    """What `torch.utils.collect_env` would show of this host, plus Ray's view of it."""
    import psutil

    memory = psutil.virtual_memory()
    try:
        import ray

        ray_version = ray.__version__
    except Exception:
        ray_version = None
    return {
        "hostname": socket.gethostname(),
        "ip": _node_ip(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": psutil.cpu_count(logical=True),
        "cpus_physical": psutil.cpu_count(logical=False),
        "memory_total_bytes": memory.total,
        "memory_available_bytes": memory.available,
        "ray": ray_version,
        "torch": _torch_facts(),
        "nvidia_smi": _nvidia_smi(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }


# ----------------------------------------------------------------------------------- port


def _holders(port: int) -> list[dict[str, Any]]:
    """Processes listening on `port` on this host (best effort: needs the right privileges)."""
    import psutil

    found = []
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return found
    for conn in connections:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            entry: dict[str, Any] = {"pid": conn.pid, "address": f"{conn.laddr.ip}:{port}"}
            try:
                process = psutil.Process(conn.pid)
                entry["name"] = process.name()
                entry["cmdline"] = " ".join(process.cmdline())[:200]
            except (psutil.Error, TypeError):
                pass
            found.append(entry)
    return found


def bind_check(port: int) -> dict[str, Any]:
    """Can a process group's store listen on `port` here? Bind and listen as TCPStore does.

    SO_REUSEADDR is set, as torch sets it, so sockets lingering in TIME_WAIT do not count:
    only a live listener (or a bound socket) makes the port unusable.
    """
    attempts = []
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        if family == socket.AF_INET6 and not socket.has_ipv6:
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address, port))
                sock.listen(1)
            attempts.append({"address": f"{address}:{port}", "ok": True})
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno in (97, 99):  # no IPv6 on this host
                continue
            attempts.append({"address": f"{address}:{port}", "ok": False, "error": str(exc)})
    ok = all(a["ok"] for a in attempts)
    return {"port": port, "ok": ok, "attempts": attempts, "holders": [] if ok else _holders(port)}


def node_probe(port: int | None) -> dict[str, Any]:
    """The per-node task: the fingerprint, and the master-port check when asked."""
    started = time.perf_counter()
    result: dict[str, Any] = {"fingerprint": fingerprint()}
    result["fingerprint_seconds"] = time.perf_counter() - started
    if port is not None:
        started = time.perf_counter()
        result["port"] = bind_check(port)
        result["port"]["seconds"] = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------------- device


def _devices(gpus: int) -> tuple[list[str], dict[str, Any]]:
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts: dict[str, Any] = {"cuda_visible_devices": visible, "torch": torch.__version__}
    if not gpus:
        return ["cpu"], facts
    try:
        facts["cuda_available"] = torch.cuda.is_available()
        facts["device_count"] = torch.cuda.device_count()
    except Exception as exc:
        facts["cuda_available"] = False
        facts["device_count"] = 0
        facts["error"] = error_text(exc)
    return [f"cuda:{i}" for i in range(facts["device_count"])], facts


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _matmul(device: str) -> dict[str, Any]:
    """A matmul on `device`, checked against the CPU and timed."""
    import torch

    result: dict[str, Any] = {"device": device}
    try:
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(MATMUL_N, MATMUL_N, generator=generator)
        b = torch.randn(MATMUL_N, MATMUL_N, generator=generator)
        expected = a @ b
        a_dev, b_dev = a.to(device), b.to(device)
        got = (a_dev @ b_dev).cpu()
        # TF32 (the default for matmuls on Ampere and later) rounds inputs to 10 bits.
        error = float((got - expected).abs().max() / expected.abs().max())
        result["max_relative_error"] = error
        result["ok"] = bool(torch.isfinite(got).all()) and error < 1e-2
        _sync(device)
        start = time.perf_counter()
        for _ in range(TIMED_MATMULS):
            a_dev @ b_dev
        _sync(device)
        seconds = (time.perf_counter() - start) / TIMED_MATMULS
        result["seconds"] = seconds
        result["tflops"] = 2 * MATMUL_N**3 / seconds / 1e12
        if device.startswith("cuda"):
            result["name"] = torch.cuda.get_device_name(device)
    except Exception as exc:
        result["ok"] = False
        result["error"] = error_text(exc)
    return result


def _headroom_cuda(device: str, fraction: float) -> dict[str, Any]:
    import torch

    free, total = torch.cuda.mem_get_info(device)
    want = int(free * fraction)
    result: dict[str, Any] = {
        "device": device,
        "free_bytes": free,
        "total_bytes": total,
        "fraction": fraction,
        "requested_bytes": want,
    }
    try:
        block = torch.empty(want, dtype=torch.uint8, device=device)
        block.fill_(1)  # touch it: an allocation that is never written can be lazy
        _sync(device)
        del block
        result["ok"] = True
    except Exception as exc:
        result["ok"] = False
        result["error"] = error_text(exc)
    finally:
        torch.cuda.empty_cache()
    return result


def _headroom_host(fraction: float, cap_bytes: int) -> dict[str, Any]:
    """Host memory: how far this node is from Ray's memory-monitor threshold, and a touched
    allocation of `fraction` of that margin (capped, so a smoke run never pushes a shared node
    toward the kill line)."""
    import psutil
    import torch

    memory = psutil.virtual_memory()
    # Ray's own (lower-case) name for the memory monitor's kill threshold.
    threshold = float(os.environ.get("RAY_memory_usage_threshold", "0.95"))  # noqa: SIM112
    used = memory.total - memory.available
    margin = max(0, int(threshold * memory.total) - used)
    want = min(int(margin * fraction), cap_bytes)
    result: dict[str, Any] = {
        "device": "cpu",
        "free_bytes": memory.available,
        "total_bytes": memory.total,
        "used_fraction": used / memory.total,
        "memory_monitor_threshold": threshold,
        "margin_bytes": margin,
        "fraction": fraction,
        "requested_bytes": want,
        "cap_bytes": cap_bytes,
    }
    try:
        block = torch.ones(max(1, want // 4), dtype=torch.float32)
        del block
        result["ok"] = True
    except Exception as exc:
        result["ok"] = False
        result["error"] = error_text(exc)
    return result


def device_probe(gpus: int, fraction: float, cpu_cap_bytes: int) -> dict[str, Any]:
    """Visibility, a checked matmul per device, then the memory headroom per device."""
    try:
        devices, facts = _devices(gpus)
    except Exception as exc:  # torch itself does not import on this node
        return {"devices": [], "error": error_text(exc), "node_ip": _node_ip()}
    facts["node_ip"] = _node_ip()
    facts["hostname"] = socket.gethostname()
    facts["matmul"] = [_matmul(d) for d in devices]
    if gpus:
        facts["headroom"] = [_headroom_cuda(d, fraction) for d in devices]
    else:
        facts["headroom"] = [_headroom_host(fraction, cpu_cap_bytes)]
    facts["devices"] = devices
    return facts


# ----------------------------------------------------------------------------- checkpoint


def _write_checkpoint(directory: str) -> dict[str, Any]:
    import json

    import torch

    payload = os.urandom(CHECKPOINT_PAYLOAD_BYTES)
    with open(os.path.join(directory, "payload.bin"), "wb") as f:
        f.write(payload)
    tensor = torch.arange(4096, dtype=torch.float32)
    torch.save({"weights": tensor}, os.path.join(directory, "tensor.pt"))
    manifest = {
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "tensor_sum": float(tensor.sum()),
        "written_by": {"hostname": socket.gethostname(), "ip": _node_ip(), "pid": os.getpid()},
    }
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return manifest


def _read_checkpoint(directory: str) -> dict[str, Any]:
    """Check a restored checkpoint against the manifest saved with it."""
    import json

    import torch

    result: dict[str, Any] = {"files": sorted(os.listdir(directory))}
    missing = [name for name in CHECKPOINT_FILES if name not in result["files"]]
    if missing:
        result.update(ok=False, error=f"files missing after restore: {', '.join(missing)}")
        return result
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(directory, "payload.bin"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    state = torch.load(os.path.join(directory, "tensor.pt"), weights_only=True)
    tensor_sum = float(state["weights"].sum())
    problems = []
    if digest != manifest["payload_sha256"]:
        problems.append(
            f"payload.bin sha256 {digest[:12]}… != saved {manifest['payload_sha256'][:12]}…"
        )
    if tensor_sum != manifest["tensor_sum"]:
        problems.append(f"tensor.pt sums to {tensor_sum}, saved {manifest['tensor_sum']}")
    result.update(ok=not problems, problems=problems, written_by=manifest.get("written_by"))
    result["restored_by"] = {"hostname": socket.gethostname(), "ip": _node_ip(), "pid": os.getpid()}
    return result


def make_smoke_trial(
    collector, gpus: int, fraction: float, cpu_cap_bytes: int, report_module: str = "ray.tune"
):
    """The Tune trainable of the device and checkpoint stages: probe the devices, then save a
    checkpoint and report it, which uploads it to the storage path. `restore_checkpoint`
    then reads it back in another process. `report_module` holds this Ray's `report` and
    `Checkpoint` for function trainables (ray.tune from Ray 2.41, ray.train before)."""

    def ray_doctor_smoke(config):
        import importlib
        import tempfile

        tune = importlib.import_module(report_module)

        started = time.perf_counter()
        device = device_probe(gpus, fraction, cpu_cap_bytes)
        device["probe_seconds"] = time.perf_counter() - started
        collector.put.remote("device", device)
        with tempfile.TemporaryDirectory() as directory:
            try:
                manifest = _write_checkpoint(directory)
                started = time.perf_counter()
                tune.report({"saved": 1}, checkpoint=tune.Checkpoint.from_directory(directory))
                manifest["report_seconds"] = time.perf_counter() - started
            except Exception as exc:
                ray_get(
                    collector.put.remote("checkpoint_save", {"ok": False, "error": error_text(exc)})
                )
                raise
        ray_get(collector.put.remote("checkpoint_save", {"ok": True, **manifest}))

    return ray_doctor_smoke


def restore_checkpoint(checkpoint) -> dict[str, Any]:
    """Download a reported checkpoint from storage (Ray's own `Checkpoint.as_directory`) in
    this process, and check it against the manifest saved with it."""
    started = time.perf_counter()
    try:
        with checkpoint.as_directory() as directory:
            restored = _read_checkpoint(directory)
    except Exception as exc:
        restored = {"ok": False, "error": error_text(exc)}
    restored["restore_seconds"] = time.perf_counter() - started
    return restored


def ray_get(ref):
    import ray

    return ray.get(ref)


# ----------------------------------------------------------------------------- collective


def _push_flight_recorder(collector, rank: int) -> None:
    """This rank's Flight Recorder buffer (JSON, dumped on demand) to the driver; the
    collective stage turns Flight Recorder on (smoke/_flight_recorder.py)."""
    try:
        from torch._C._distributed_c10d import _dump_fr_trace_json

        dump = _dump_fr_trace_json(includeCollectives=True)
        text = dump.decode("utf-8", "replace") if isinstance(dump, bytes) else str(dump)
        ray_get(collector.put.remote(f"fr:{rank}", text))
    except Exception:
        pass  # no Flight Recorder in this torch build: the stage reports without it


def make_allreduce_loop(collector, elements: int, repeats: int):
    """The Train loop of the collective stage: every rank allreduces `rank + 1` and checks
    that it got 1 + 2 + ... + world_size, then times `repeats` more allreduces."""

    def ray_doctor_allreduce(config):
        import ray.train
        import ray.train.torch
        import torch
        import torch.distributed as dist

        context = ray.train.get_context()
        rank, world = context.get_world_rank(), context.get_world_size()
        device = ray.train.torch.get_device()
        entry: dict[str, Any] = {
            "rank": rank,
            "world_size": world,
            "device": str(device),
            "hostname": socket.gethostname(),
            "ip": _node_ip(),
            "backend": dist.get_backend(),
        }
        collector.put.remote(f"rank:{rank}", {**entry, "stage": "joined"})
        tensor = torch.full((elements,), float(rank + 1), device=device)
        try:
            dist.all_reduce(tensor)
        except Exception:
            _push_flight_recorder(collector, rank)
            raise
        expected = world * (world + 1) / 2
        entry["ok"] = bool(torch.all(tensor == expected))
        entry["value"] = float(tensor[0])
        entry["expected"] = expected
        times = []
        for _ in range(repeats):
            tensor.fill_(float(rank + 1))
            _sync(str(device))
            start = time.perf_counter()
            try:
                dist.all_reduce(tensor)
                _sync(str(device))
            except Exception:
                _push_flight_recorder(collector, rank)
                raise
            times.append(time.perf_counter() - start)
        entry["seconds"] = sorted(times)[len(times) // 2] if times else None
        size = elements * tensor.element_size()
        if entry["seconds"]:
            # nccl-tests' bus bandwidth: what each link carried, comparable across sizes.
            entry["busbw_gbps"] = size / entry["seconds"] * 2 * (world - 1) / world / 1e9
        entry["bytes"] = size
        entry["stage"] = "done"
        ray.get(collector.put.remote(f"rank:{rank}", entry))
        ray.train.report({"ok": entry["ok"]})

    return ray_doctor_allreduce


# ------------------------------------------------------------------------------- relaunch


def _process_rss(process) -> int:
    import psutil

    rss = process.memory_info().rss
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            rss += child.memory_info().rss
    return rss


def _device_peak() -> int | None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))


class PeakSampler:
    """Samples this process's RSS (with its children: data loader workers) and the peak
    device memory torch allocated, and pushes the peaks to the collector every second, so a
    trial that is killed still leaves its last peaks behind."""

    INTERVAL_S = 0.1
    PUSH_EVERY_S = 1.0

    def __init__(self, collector, key: str) -> None:
        import threading

        import psutil

        self.collector, self.key = collector, key
        self.process = psutil.Process()
        self.peaks: dict[str, Any] = {
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "ip": _node_ip(),
            "host_rss_bytes": 0,
            "device_bytes": None,
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ray-doctor-peaks", daemon=True)

    def _sample(self) -> None:
        try:
            rss = _process_rss(self.process)
        except Exception:
            return
        self.peaks["host_rss_bytes"] = max(self.peaks["host_rss_bytes"], rss)
        device = _device_peak()
        if device is not None:
            self.peaks["device_bytes"] = max(self.peaks["device_bytes"] or 0, device)

    def _run(self) -> None:
        pushed = 0.0
        while not self._stop.wait(self.INTERVAL_S):
            self._sample()
            if time.monotonic() - pushed >= self.PUSH_EVERY_S:
                self.collector.put.remote(self.key, dict(self.peaks))
                pushed = time.monotonic()

    def start(self) -> None:
        # A first sample before the trainable runs: a trial that Tune stops within the first
        # interval (its `finally` never runs) still leaves a peak behind.
        self._sample()
        self.collector.put.remote(self.key, dict(self.peaks))
        self._thread.start()

    def stop(self) -> None:
        import ray

        self._stop.set()
        self._thread.join(timeout=2)
        self._sample()
        ray.get(self.collector.put.remote(self.key, dict(self.peaks)))


def measured(trainable, collector, key: str = "relaunch_peaks"):
    """The user's trainable, unchanged, with a PeakSampler around it.

    A function trainable is wrapped by a function of the same name (Tune names trials after
    it); a Trainable class by a subclass that samples from setup() to cleanup().
    """
    if isinstance(trainable, type):

        class Measured(trainable):
            def setup(self, config):
                self._ray_doctor_peaks = PeakSampler(collector, key)
                self._ray_doctor_peaks.start()
                return super().setup(config)

            def cleanup(self):
                try:
                    return super().cleanup()
                finally:
                    self._ray_doctor_peaks.stop()

        Measured.__name__ = Measured.__qualname__ = trainable.__name__
        return Measured

    def wrapper(config):
        sampler = PeakSampler(collector, key)
        sampler.start()
        try:
            return trainable(config)
        finally:
            sampler.stop()

    wrapper.__name__ = wrapper.__qualname__ = getattr(trainable, "__name__", "trainable")
    return wrapper
