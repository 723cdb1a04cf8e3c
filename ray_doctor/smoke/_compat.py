"""Which Ray API smoke drives: the installed Ray decides, and this module is the only place
that asks.

Ray moved the pieces smoke uses between 2.9 and 2.60:
- A function trainable reports metrics and checkpoints with `ray.train.report` and
  `ray.train.Checkpoint` up to 2.40, and with `ray.tune.report` / `ray.tune.Checkpoint` from
  2.41; Tune's own `RunConfig` and `FailureConfig` moved to `ray.tune` with them (before,
  Tune took `ray.train`'s).
- Ray Train V2 (the default in recent Rays) runs a controller that takes no CPUs. Train V1's
  `TorchTrainer` runs as a Tune trial whose trainer actor takes 1 CPU, merged into rank 0's
  bundle: 2 workers x 1 CPU then need 3 CPUs, and never start on 2. Smoke gives that actor
  0 CPUs (it only coordinates), so a V1 run asks for what a V2 run asks for.

One behaviour is known by the release number, since smoke must know it before Ray starts:
from 2.10, Ray starts a worker that has a runtime env without quoting the interpreter's path.

The choice is made by looking for the objects themselves, not by comparing version numbers:
a Ray that has `ray.tune.report` uses it. A piece no path provides is recorded as missing;
the stage that needs it fails as a limitation of ray-doctor (stage error, exit 2), never as
a finding about the user's cluster.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

# Ray's own error for a name smoke looked up where this Ray has none: the tool's mistake.
_MISSING_RAY_NAME = re.compile(
    r"AttributeError: module '(ray(?:\.\w+)*)' has no attribute '(\w+)'"
    r"|ImportError: cannot import name '(\w+)' from '(ray(?:\.\w+)*)'"
)
SUPPORTED = "Ray 2.9 or newer"


class RayApiMissing(Exception):
    """The installed Ray lacks a piece of API a stage needs: a limitation of ray-doctor."""

    def __init__(self, piece: str, why: str) -> None:
        super().__init__(why)
        self.piece = piece


def limitation(why: str) -> str:
    """The message of a stage ray-doctor could not run on this Ray (stage error, exit 2)."""
    return (
        f"ray-doctor could not run this stage: {why}. This is a limitation of ray-doctor on "
        "this Ray version, not a problem of this cluster."
    )


@dataclass(frozen=True)
class RayApi:
    """The API path smoke takes on the installed Ray."""

    ray_version: str
    tune_module: str | None  # holds the function trainable's report() and Checkpoint
    tune_config_module: str | None  # holds the RunConfig / FailureConfig a Tuner takes
    train: str | None  # "v2", "v1", or None when ray.train.torch is missing
    missing: dict[str, str] = field(default_factory=dict)  # piece -> why

    def require(self, piece: str) -> None:
        """Raise `RayApiMissing` when `piece` ("tune" or "train") has no path on this Ray."""
        if piece in self.missing:
            raise RayApiMissing(
                piece,
                f"Ray {self.ray_version} {self.missing[piece]} (smoke's {piece} stages need "
                f"{SUPPORTED})",
            )

    def tune_configs(self) -> tuple[Any, Any]:
        """(RunConfig, FailureConfig) for a Tuner on this Ray."""
        self.require("tune")
        module = importlib.import_module(self.tune_config_module or "")
        return module.RunConfig, module.FailureConfig

    def trainer_resources(self) -> dict[str, float] | None:
        """`ScalingConfig(trainer_resources=...)`: Train V1's trainer actor takes no CPU of
        its own (see the module docstring); Train V2 has no such actor."""
        return {"CPU": 0} if self.train == "v1" else None

    def describe(self) -> str:
        """One line for the report: which path was used."""
        parts = []
        if self.tune_module:
            parts.append(
                f"Tune trials report with {self.tune_module}.report and Tuners take "
                f"{self.tune_config_module}.RunConfig"
            )
        if self.train == "v1":
            parts.append("Ray Train V1 (TorchTrainer's trainer actor asked for 0 CPUs)")
        elif self.train == "v2":
            parts.append("Ray Train V2")
        parts += [f"{piece}: {why}" for piece, why in self.missing.items()]
        return f"Ray {self.ray_version} API: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "ray_version": self.ray_version,
            "tune_report": f"{self.tune_module}.report" if self.tune_module else None,
            "tune_run_config": (
                f"{self.tune_config_module}.RunConfig" if self.tune_config_module else None
            ),
            "train": self.train,
            "missing": dict(self.missing),
            "summary": self.describe(),
        }


def _has(module_name: str, *names: str) -> bool:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    return all(hasattr(module, name) for name in names)


def _train_generation() -> str:
    """V2 where this Ray has it and has it on (RAY_TRAIN_V2_ENABLED, read by Ray itself)."""
    try:
        from ray.train.v2._internal.constants import is_v2_enabled
    except ImportError:
        return "v1"
    return "v2" if is_v2_enabled() else "v1"


def detect(pieces: frozenset[str] = frozenset(("tune", "train"))) -> RayApi:
    """The API path on the Ray this process imports (the driver's: workers run the same).
    Only `pieces` are looked up: finding Train's imports torch, seconds a run without the
    collective stage need not spend."""
    import ray

    missing: dict[str, str] = {}
    tune_module = config_module = train = None
    if "tune" in pieces:
        tune_module = next(
            (name for name in ("ray.tune", "ray.train") if _has(name, "report", "Checkpoint")),
            None,
        )
        config_module = next(
            (n for n in ("ray.tune", "ray.train") if _has(n, "RunConfig", "FailureConfig")), None
        )
        if tune_module is None or config_module is None:
            tune_module = config_module = None
            missing["tune"] = "has no ray.tune.report nor ray.train.report with a Checkpoint"
    if "train" in pieces:
        if _has("ray.train.torch", "TorchTrainer", "TorchConfig") and _has(
            "ray.train", "ScalingConfig", "RunConfig", "FailureConfig", "get_context"
        ):
            train = _train_generation()
        else:
            missing["train"] = "has no ray.train.torch.TorchTrainer with ray.train.ScalingConfig"
    return RayApi(ray.__version__, tune_module, config_module, train, missing)


def missing_ray_name(text: str) -> str | None:
    """'ray.tune.RunConfig' when `text` is Ray's error for a name this Ray does not have."""
    match = _MISSING_RAY_NAME.search(text)
    if match is None:
        return None
    module, name = (match.group(1), match.group(2)) if match.group(1) else match.group(4, 3)
    return f"{module}.{name}"


# Characters a shell splits or expands: Ray 2.10+ starts a worker that has a runtime env (every
# Tune trial: Tune gives each one env_vars) with `bash -c "exec <python> ..."`, its other
# arguments quoted but not the interpreter's path (ray/_private/runtime_env/context.py,
# `exec_worker`; 2.9 escaped it). Such a worker never starts and the run waits forever.
SHELL_UNSAFE = re.compile(r"[\s'\"$`\\;&|<>()*?\[\]{}!#~]")
FIRST_UNQUOTED_RAY = (2, 10)


def _ray_release() -> tuple[int, int] | None:
    try:
        found = re.match(r"(\d+)\.(\d+)", metadata.version("ray"))
    except metadata.PackageNotFoundError:
        return None
    return (int(found[1]), int(found[2])) if found else None


def unstartable_interpreter(executable: str = sys.executable) -> str | None:
    """Why a local Ray cannot start Tune's trial workers with this Python, or None."""
    release = _ray_release()
    if release is None or release < FIRST_UNQUOTED_RAY or os.name == "nt":
        return None
    if not SHELL_UNSAFE.search(executable):
        return None
    return (
        f"this Python's path has a space or shell character ({executable}): Ray "
        f"{'.'.join(map(str, release))} starts every Tune trial's worker through `bash -c` "
        "without quoting the interpreter's path, so no trial ever starts. Run smoke (and the "
        "training) from a virtualenv at a path without spaces, or against a cluster with "
        "--address."
    )
