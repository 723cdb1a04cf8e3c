"""torch.save files (zip and legacy) and plain pickles: structure, globals, tensors, state dicts."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from typing import Any

from ray_doctor.checkpoint import _zip
from ray_doctor.checkpoint._allow import RAY_BOOKKEEPING_FILES, WEIGHTS, allowed, dangerous
from ray_doctor.checkpoint._model import FileResult, Optimizer, StateDict, Tensor
from ray_doctor.checkpoint._pickle import (
    Global,
    Obj,
    Persistent,
    PickleError,
    PickleInfo,
    analyse,
    analyse_stream,
)
from ray_doctor.checkpoint._values import NonfiniteCounter, counted_dtype
from ray_doctor.storage import LocalStorage, Storage, StorageError

MAX_PICKLE = 512 * 1024 * 1024  # a data.pkl larger than this is not a checkpoint's index
MAX_DEPTH = 64
# Bytes per element of each legacy storage class torch names in its persistent ids.
STORAGE_DTYPES = {
    "DoubleStorage": ("float64", 8),
    "FloatStorage": ("float32", 4),
    "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2),
    "LongStorage": ("int64", 8),
    "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2),
    "CharStorage": ("int8", 1),
    "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1),
    "ComplexFloatStorage": ("complex64", 8),
    "ComplexDoubleStorage": ("complex128", 16),
    "QInt8Storage": ("qint8", 1),
    "QUInt8Storage": ("quint8", 1),
    "QInt32Storage": ("qint32", 4),
    "QUInt4x2Storage": ("quint4x2", 1),
    "QUInt2x4Storage": ("quint2x4", 1),
    "UntypedStorage": ("uint8", 1),
}
REBUILD_TENSOR = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"}
BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


def check_globals(
    result: FileResult, info: PickleInfo, allowlist: frozenset[str], where: str
) -> None:
    bookkeeping = result.raw_path.rsplit("/", 1)[-1] in RAY_BOOKKEEPING_FILES
    seen: set[str] = set()
    for ref, offset in info.globals:
        result.globals.append(ref.dotted)
        if ref.dotted in seen or allowed(ref, allowlist, bookkeeping):
            continue
        seen.add(ref.dotted)
        kind = "a known code-execution route" if dangerous(ref) else "not on the allowlist"
        result.problem(
            "checkpoint-unsafe",
            f"{where} references the global `{ref.dotted}` ({kind}): loading it with a full "
            "unpickler would run code named by the file",
            excerpt=f"{ref.dotted} at pickle byte {offset}",
        )


def _storage_of(pid: Any) -> tuple[str, str, int] | None:
    """(key, dtype, numel) from torch's ('storage', StorageClass, key, location, numel, ...)."""
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
        return None
    kind, key, numel = pid[1], pid[2], pid[4]
    name = kind.name if isinstance(kind, Global) else str(kind)
    dtype = STORAGE_DTYPES.get(name, ("unknown", 1))[0]
    if not isinstance(key, str) or not isinstance(numel, int):
        return None
    return key, dtype, numel


def _elsize(dtype: str) -> int:
    for _name, (storage_dtype, size) in STORAGE_DTYPES.items():
        if storage_dtype == dtype:
            return size
    return 1


def _tensor_args(node: Obj) -> tuple[Persistent, int, tuple, tuple] | None:
    func = node.callable
    if not isinstance(func, Global) or func.module != "torch._utils":
        return None
    if func.name in REBUILD_TENSOR and isinstance(node.args, tuple) and len(node.args) >= 4:
        storage, offset, size, stride = node.args[:4]
        if isinstance(storage, Persistent) and isinstance(size, tuple):
            return storage, offset if isinstance(offset, int) else 0, size, stride
    return None


def _inner(node: Any) -> Any:
    """Parameters and subclass wrappers hold the real tensor inside."""
    for _ in range(4):
        if not isinstance(node, Obj) or not isinstance(node.callable, Global):
            return node
        name = node.callable.name
        if name in ("_rebuild_parameter", "_rebuild_parameter_with_state") and node.args:
            node = node.args[0]
        elif (
            name == "_rebuild_from_type_v2" and isinstance(node.args, tuple) and len(node.args) >= 3
        ):
            func, args = node.args[0], node.args[2]
            node = Obj(func, args)
        else:
            return node
    return node


def _children(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, Obj):
        if node.items:
            items = node.items.items()
        elif isinstance(node.state, dict):
            items = node.state.items()
        else:
            items = enumerate(node.list_items)
    elif isinstance(node, (list, tuple)):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        yield str(key), value


def walk_tensors(root: Any) -> Iterator[tuple[str, Obj, tuple[Persistent, int, tuple, tuple]]]:
    """(key path, node, tensor args) for each tensor, depth-first, without recursion."""
    stack: list[tuple[str, Any, int]] = [("", root, 0)]
    seen: set[int] = set()
    while stack:
        path, node, depth = stack.pop()
        node = _inner(node)
        if id(node) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(node))
        if isinstance(node, Obj):
            args = _tensor_args(node)
            if args is not None:
                yield path, node, args
                continue
        children = list(_children(node))
        for key, value in reversed(children):
            stack.append((f"{path}.{key}" if path else key, value, depth + 1))


def _shape(size: tuple) -> tuple[int, ...]:
    return tuple(int(s) if isinstance(s, int) else -1 for s in size)


def _extent(offset: int, size: tuple, stride: Any) -> int:
    """Elements of storage a tensor view needs."""
    if not isinstance(stride, tuple) or len(stride) != len(size):
        return 0
    if any(isinstance(s, int) and s == 0 for s in size):
        return 0
    span = sum(
        (s - 1) * st
        for s, st in zip(size, stride, strict=True)
        if isinstance(s, int) and isinstance(st, int)
    )
    return offset + span + 1


def _merge_groups(root: Any, tensors: dict[str, tuple[int, ...]]) -> list[StateDict]:
    found: list[StateDict] = []
    stack: list[tuple[str, Any, int]] = [("", root, 0)]
    while stack:
        path, node, depth = stack.pop()
        if depth > MAX_DEPTH:
            continue
        children = list(_children(node)) if not isinstance(node, (list, tuple)) else []
        if children:
            names = [f"{path}.{k}" if path else k for k, _ in children]
            tensor_names = [n for n in names if n in tensors]
            if tensor_names and len(tensor_names) * 2 >= len(names):
                keys = [k for (k, _), n in zip(children, names, strict=True) if n in tensors]
                shapes = {
                    k: tensors[n] for (k, _), n in zip(children, names, strict=True) if n in tensors
                }
                found.append(StateDict(path, keys, shapes))
                continue
        for key, value in children:
            if not (isinstance(value, Obj) and _tensor_args(_inner(value))):
                stack.append((f"{path}.{key}" if path else key, value, depth + 1))
    return found


def optimizers(root: Any, tensors: dict[str, tuple[int, ...]]) -> list[Optimizer]:
    """torch optimizer state dicts: {"state": {id: {...}}, "param_groups": [{"params": [...]}]}."""
    found = []
    stack: list[tuple[str, Any, int]] = [("", root, 0)]
    while stack:
        path, node, depth = stack.pop()
        if depth > MAX_DEPTH:
            continue
        mapping = (
            node if isinstance(node, dict) else (node.items if isinstance(node, Obj) else None)
        )
        if isinstance(mapping, dict) and "state" in mapping and "param_groups" in mapping:
            groups = mapping["param_groups"]
            ids = [
                p
                for group in (groups if isinstance(groups, list) else [])
                if isinstance(group, dict)
                for p in (group.get("params") or [])
                if isinstance(p, int)
            ]
            state_shapes: dict[int, tuple[int, ...]] = {}
            state = mapping["state"]
            prefix = f"{path}.state" if path else "state"
            if isinstance(state, dict):
                for pid, entry in state.items():
                    if not isinstance(pid, int):
                        continue
                    for key, _ in _children(entry):
                        shape = tensors.get(f"{prefix}.{pid}.{key}")
                        if shape is not None and len(shape) > 0:
                            state_shapes[pid] = shape
                            break
            found.append(Optimizer(path, ids, state_shapes))
            continue
        for key, value in _children(node):
            stack.append((f"{path}.{key}" if path else key, value, depth + 1))
    return found


def analyse_torch_zip(
    storage: Storage, result: FileResult, workers: int = 2, count_values: bool = False
) -> dict[int, int] | None:
    """Structure, CRCs, globals and tensors of a torch.save zip.

    With `count_values` on remote storage the tensors' NaN / Inf are counted in the same pass
    that checks the CRCs, so each byte is fetched once, not once per pass (a 1 GB checkpoint
    on S3: 17 GETs, not 33). Returns those counts by index in `result.tensors`, else None.
    """
    try:
        members = _zip.read_directory(storage, result.raw_path, result.size)
    except _zip.ZipError as exc:
        result.problem("checkpoint-corrupt", f"broken zip archive: {exc}")
        return None
    except StorageError as exc:
        result.problem("checkpoint-corrupt", f"cannot read: {exc.reason}")
        return None
    if not count_values or isinstance(storage, LocalStorage):
        for problem in _zip.check_members(storage, result.raw_path, members, workers):
            result.problem("checkpoint-corrupt", problem)
        _analyse_index(storage, result, members)
        return None
    # The pickle first (it locates the tensors), then the CRC pass feeding the counters; the
    # CRC problems are still listed first, as in the order above.
    _analyse_index(storage, result, members)
    found_in_index, result.problems = result.problems, []
    counters, observers = _value_counters(result, members)
    for problem in _zip.check_members(storage, result.raw_path, members, workers, observers):
        result.problem("checkpoint-corrupt", problem)
    result.problems += found_in_index
    return {index: counter.count for index, counter in counters.items()}


def _analyse_index(storage: Storage, result: FileResult, members: list[_zip.Member]) -> None:
    """data.pkl: its globals and the tensors it declares."""
    by_name = {m.name: m for m in members}
    pickles = [m for m in members if m.name.endswith("/data.pkl") or m.name == "data.pkl"]
    if not pickles:
        return  # a zip that is not torch's format: its integrity is all we can check
    index = pickles[0]
    prefix = index.name[: -len("data.pkl")]
    result.format = "torch-zip"
    try:
        info = analyse(_zip.read_member(storage, result.raw_path, index, MAX_PICKLE))
    except (PickleError, _zip.ZipError, StorageError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        result.problem("checkpoint-corrupt", f"{index.name} is not a readable pickle: {reason}")
        return
    check_globals(result, info, WEIGHTS, index.name)
    _collect(storage, result, info, prefix, by_name)


def _value_counters(
    result: FileResult, members: list[_zip.Member]
) -> tuple[dict[int, NonfiniteCounter], dict[str, _zip.Observer]]:
    """A counter per located float tensor in a stored member, and per member the observer
    that feeds its tensors' counters (positions are within the member's bytes)."""
    stored = {m.name for m in members if m.method == 0}
    counters: dict[int, NonfiniteCounter] = {}
    by_member: dict[str, list[NonfiniteCounter]] = {}
    for index, tensor in enumerate(result.tensors):
        dtype = counted_dtype(tensor)
        if dtype is None or tensor.location[1] not in stored:
            continue
        _, member_name, offset, length = tensor.location
        counters[index] = NonfiniteCounter(dtype, offset, length)
        by_member.setdefault(member_name, []).append(counters[index])

    def observer(member_counters: list[NonfiniteCounter]) -> _zip.Observer:
        def feed(position: int, chunk: bytes) -> None:
            for counter in member_counters:
                counter.feed(position, chunk)

        return feed

    return counters, {name: observer(found) for name, found in by_member.items()}


def _collect(
    storage: Storage, result: FileResult, info: PickleInfo, prefix: str, by_name: dict
) -> None:
    shapes: dict[str, tuple[int, ...]] = {}
    for name, _node, (persistent, offset, size, stride) in walk_tensors(info.root):
        storage_info = _storage_of(persistent.pid)
        if storage_info is None:
            continue
        key, dtype, numel = storage_info
        member = by_name.get(f"{prefix}data/{key}")
        shape = _shape(size)
        shapes[name] = shape
        location = None
        if member is None:
            result.problem(
                "checkpoint-corrupt",
                f"tensor {name} needs storage data/{key}, which is not in the archive",
            )
        else:
            expected = numel * _elsize(dtype) if dtype != "uint8" or numel else 0
            if dtype != "unknown" and member.size != expected:
                result.problem(
                    "checkpoint-corrupt",
                    f"storage data/{key} of tensor {name} holds {member.size} bytes, "
                    f"{numel} x {dtype} needs {expected}",
                )
            elif _extent(offset, size, stride) > numel:
                result.problem(
                    "checkpoint-corrupt",
                    f"tensor {name} {list(shape)} reaches past the end of its storage data/{key}",
                )
            else:
                location = (
                    result.raw_path,
                    member.name,
                    offset * _elsize(dtype),
                    _nbytes(shape, dtype),
                )
        result.tensors.append(Tensor(name, dtype, shape, location))
    result.state_dicts = _merge_groups(info.root, shapes)
    result.optimizers = optimizers(info.root, shapes)


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(max(0, s) for s in shape) * _elsize(dtype)


def analyse_pickle(storage: Storage, result: FileResult) -> None:
    """A plain pickle, or torch's legacy (pre-1.6) format: a run of pickles then raw storages."""
    try:
        data = storage.read_bytes(result.raw_path, MAX_PICKLE)
    except StorageError as exc:
        result.problem("checkpoint-corrupt", f"cannot read: {exc.reason}")
        return
    stream = io.BytesIO(data)
    infos: list[PickleInfo] = []
    for index in range(5):  # legacy torch: magic, protocol, sys info, data, storage keys
        start = stream.tell()
        if start >= len(data):
            break
        try:
            infos.append(analyse_stream(stream))
        except PickleError as exc:
            if index == 0:
                result.problem("checkpoint-corrupt", f"not a readable pickle: {exc}")
                return
            break  # the raw storage bytes that follow a legacy torch file's pickles
        check_globals(result, infos[-1], WEIGHTS, f"pickle #{index + 1}")
        if index == 0 and not _legacy_magic(infos[0].root):
            break
    if len(infos) >= 4 and _legacy_magic(infos[0].root):
        result.format = "torch-legacy"
        shapes = {
            name: _shape(size) for name, _n, (_p, _o, size, _s) in walk_tensors(infos[3].root)
        }
        result.tensors = [Tensor(n, "unknown", s) for n, s in shapes.items()]
        result.state_dicts = _merge_groups(infos[3].root, shapes)
        result.optimizers = optimizers(infos[3].root, shapes)
    elif infos:
        shapes = {}
        result.state_dicts = _merge_groups(infos[0].root, shapes)


LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _legacy_magic(root: Any) -> bool:
    return root == LEGACY_MAGIC
