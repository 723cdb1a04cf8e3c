"""torch.distributed.checkpoint dirs: a pickled `.metadata` and `*.distcp` shards.

`.metadata` is read with the symbolic pickle machine (never unpickled) and every storage entry
it lists is checked against the shard files: present, and offset + length inside the file.
"""

from __future__ import annotations

from typing import Any

from ray_doctor.checkpoint._allow import DCP
from ray_doctor.checkpoint._model import FileResult, StateDict, Tensor
from ray_doctor.checkpoint._pickle import Global, Obj, PickleError, analyse
from ray_doctor.checkpoint._torchfile import check_globals
from ray_doctor.storage import Entry, Storage, StorageError

METADATA = ".metadata"
MAX_METADATA = 256 * 1024 * 1024


def is_dcp_dir(entries: list[Entry]) -> bool:
    # `.metadata` alone is enough: a DCP dir whose shards went missing is still one.
    return any(e.name == METADATA and e.is_file for e in entries)


def _field(node: Any, name: str) -> Any:
    if isinstance(node, Obj):
        if isinstance(node.state, dict) and name in node.state:
            return node.state[name]
        if isinstance(node.state, tuple) and node.state and isinstance(node.state[-1], dict):
            return node.state[-1].get(name)
    return None


def _is(node: Any, cls: str) -> bool:
    return isinstance(node, Obj) and isinstance(node.callable, Global) and node.callable.name == cls


def analyse_dir(
    storage: Storage, result: FileResult, entries: list[Entry], shard_sizes: dict[str, int]
) -> None:
    result.format = "dcp-metadata"
    try:
        info = analyse(storage.read_bytes(result.raw_path, MAX_METADATA))
    except StorageError as exc:
        result.problem("checkpoint-corrupt", f"cannot read: {exc.reason}")
        return
    except PickleError as exc:
        result.problem("checkpoint-corrupt", f".metadata is not a readable pickle: {exc}")
        return
    check_globals(result, info, DCP, ".metadata")
    if result.unsafe:
        return
    metadata = info.root
    storage_data = _field(metadata, "storage_data")
    if not isinstance(storage_data, dict):
        result.problem("checkpoint-corrupt", ".metadata has no storage_data table")
        return
    for item in storage_data.values():
        if not _is(item, "_StorageInfo"):
            continue
        shard, offset, length = (_field(item, k) for k in ("relative_path", "offset", "length"))
        if not isinstance(shard, str):
            continue
        size = shard_sizes.get(shard)
        if size is None:
            result.problem(
                "checkpoint-corrupt", f".metadata points at shard {shard}, which is missing"
            )
        elif isinstance(offset, int) and isinstance(length, int) and offset + length > size:
            result.problem(
                "checkpoint-corrupt",
                f".metadata says bytes {offset}-{offset + length} of {shard}, "
                f"but the shard holds {size} bytes (truncated)",
            )
    tensors = _field(metadata, "state_dict_metadata")
    shapes: dict[str, tuple[int, ...]] = {}
    if isinstance(tensors, dict):
        for fqn, meta in tensors.items():
            if _is(meta, "TensorStorageMetadata"):
                size = _field(meta, "size")
                dims = size.args[0] if isinstance(size, Obj) and size.args else size
                shape = (
                    tuple(d for d in dims if isinstance(d, int))
                    if isinstance(dims, (list, tuple))
                    else ()
                )
                shapes[str(fqn)] = shape
                result.tensors.append(Tensor(str(fqn), "unknown", shape))
    if shapes:
        result.state_dicts = [StateDict("", list(shapes), shapes)]
