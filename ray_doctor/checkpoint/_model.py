"""What verify-checkpoint learns about each file and checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field

from ray_doctor.model import Evidence


@dataclass
class Tensor:
    name: str  # key path in the checkpoint, e.g. "model.fc.weight", "optimizer.state.0.exp_avg"
    dtype: str  # "float32", "bfloat16", ...
    shape: tuple[int, ...]
    # Where its bytes are, for value checks: (file path, member inside a zip or None, offset,
    # length). None when the bytes cannot be located (a shard of a DCP checkpoint).
    location: tuple[str, str | None, int, int] | None = None


@dataclass
class Problem:
    rule: str
    message: str
    evidence: Evidence


@dataclass
class StateDict:
    where: str  # "" for the root, else the key path ("model", "state_dict")
    keys: list[str]
    shapes: dict[str, tuple[int, ...]]


@dataclass
class Optimizer:
    where: str
    param_ids: list[int]
    state_shapes: dict[int, tuple[int, ...]]  # param id -> shape of its first tensor state


@dataclass
class FileResult:
    path: str  # as shown in reports
    raw_path: str  # as the storage opens it
    format: (
        str  # torch-zip, torch-legacy, pickle, safetensors, dcp-metadata, zip, json, other, empty
    )
    size: int
    problems: list[Problem] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    state_dicts: list[StateDict] = field(default_factory=list)
    optimizers: list[Optimizer] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)

    @property
    def unsafe(self) -> bool:
        return any(p.rule == "checkpoint-unsafe" for p in self.problems)

    def problem(self, rule: str, message: str, line: int | None = None, excerpt: str = "") -> None:
        self.problems.append(Problem(rule, message, Evidence(self.path, line, excerpt or message)))


@dataclass
class CheckpointResult:
    """One checkpoint: a dir (Ray's checkpoint_*), a single file, or a DCP dir."""

    path: str
    kind: str  # "dir", "file", "dcp"
    files: list[FileResult] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # about the whole checkpoint
    trial_id: str | None = None
    experiment: str | None = None

    @property
    def tensors(self) -> list[Tensor]:
        return [t for f in self.files for t in f.tensors]

    @property
    def all_problems(self) -> list[Problem]:
        return self.problems + [p for f in self.files for p in f.problems]
