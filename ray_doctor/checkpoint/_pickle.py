"""Read a pickle without running it: a symbolic pickle machine over `pickletools.genops`.

Every opcode is interpreted on a shadow stack of plain values. Globals are recorded, never
imported; calls (REDUCE, NEWOBJ, INST, OBJ) and BUILD produce `Obj` records, never run. The
result is a tree of Python containers and `Obj` / `Global` / `Persistent` nodes that the
checks walk: which globals the file needs, which tensor storages it references, what the
state dict looks like. Nothing here can execute code from the file.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_OPS = 20_000_000  # opcodes interpreted before giving up (a pickle of a huge python list)


class PickleError(Exception):
    """The bytes are not a well-formed pickle; `reason` says where."""


@dataclass(frozen=True)
class Global:
    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass
class Obj:
    """Something the pickle would construct by calling `callable` (never called here)."""

    callable: Any
    args: Any = ()
    state: Any = None  # set by BUILD
    items: dict = field(default_factory=dict)  # SETITEM(S) on it (OrderedDict, dict subclasses)
    list_items: list = field(default_factory=list)  # APPEND(S) on it


@dataclass(frozen=True)
class Persistent:
    """A persistent id (torch: a storage reference)."""

    pid: Any


@dataclass
class PickleInfo:
    root: Any
    globals: list[tuple[Global, int]]  # each global with the byte offset it appears at
    persistent: list[Persistent]
    opcodes: int


class _Mark:
    pass


_MARK = _Mark()
_UNKNOWN = object()  # a value the machine cannot know (out-of-band buffers)


def _pop_mark(stack: list, marks: list[int]) -> list:
    if not marks:
        raise PickleError("MARK expected but missing")
    start = marks.pop()
    items = stack[start:]
    del stack[start:]
    return items


def _require(stack: list, n: int, op: str) -> None:
    if len(stack) < n:
        raise PickleError(f"stack underflow at {op}")


def _setitems(target: Any, pairs: list) -> None:
    if isinstance(target, dict):
        for key, value in pairs:
            try:
                target[key] = value
            except TypeError:  # an unhashable symbolic key: keep it under its id
                target[id(key)] = value
    elif isinstance(target, Obj):
        for key, value in pairs:
            try:
                target.items[key] = value
            except TypeError:
                target.items[id(key)] = value


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return id(value)
    return value


def analyse(data: bytes) -> PickleInfo:
    """Interpret one pickle (up to its STOP). Raises PickleError when it is malformed."""
    return _run(pickletools.genops(io.BytesIO(data)))


def analyse_stream(stream) -> PickleInfo:
    """Like analyse, reading from a binary stream (positioned at the pickle's start)."""
    return _run(pickletools.genops(stream))


def _run(ops: Iterator) -> PickleInfo:
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    globals_: list[tuple[Global, int]] = []
    persistent: list[Persistent] = []
    count = 0
    try:
        for op, arg, pos in ops:
            count += 1
            if count > MAX_OPS:
                raise PickleError(f"more than {MAX_OPS} opcodes")
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                _require(stack, 1, name)
                return PickleInfo(stack.pop(), globals_, persistent, count)
            if name == "MARK":
                marks.append(len(stack))
            elif name in (
                "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT",
                "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
                "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES",
                "BINBYTES8", "BYTEARRAY8",
            ):  # fmt: skip
                stack.append(arg)
            elif name == "NONE":
                stack.append(None)
            elif name == "NEWTRUE":
                stack.append(True)
            elif name == "NEWFALSE":
                stack.append(False)
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "EMPTY_SET":
                stack.append(set())
            elif name == "LIST":
                stack.append(_pop_mark(stack, marks))
            elif name == "TUPLE":
                stack.append(tuple(_pop_mark(stack, marks)))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                _require(stack, n, name)
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name == "DICT":
                items = _pop_mark(stack, marks)
                target: dict = {}
                _setitems(target, list(zip(items[::2], items[1::2], strict=False)))
                stack.append(target)
            elif name == "FROZENSET":
                stack.append(frozenset(_hashable(v) for v in _pop_mark(stack, marks)))
            elif name == "APPEND":
                _require(stack, 2, name)
                value = stack.pop()
                _append(stack[-1], [value])
            elif name == "APPENDS":
                items = _pop_mark(stack, marks)
                _require(stack, 1, name)
                _append(stack[-1], items)
            elif name == "SETITEM":
                _require(stack, 3, name)
                value, key = stack.pop(), stack.pop()
                _setitems(stack[-1], [(key, value)])
            elif name == "SETITEMS":
                items = _pop_mark(stack, marks)
                _require(stack, 1, name)
                _setitems(stack[-1], list(zip(items[::2], items[1::2], strict=False)))
            elif name == "ADDITEMS":
                items = _pop_mark(stack, marks)
                _require(stack, 1, name)
                if isinstance(stack[-1], set):
                    stack[-1].update(_hashable(v) for v in items)
            elif name == "POP":
                if marks and marks[-1] == len(stack):
                    marks.pop()  # POP of a MARK
                else:
                    _require(stack, 1, name)
                    stack.pop()
            elif name == "POP_MARK":
                _pop_mark(stack, marks)
            elif name == "DUP":
                _require(stack, 1, name)
                stack.append(stack[-1])
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                _require(stack, 1, name)
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                _require(stack, 1, name)
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    raise PickleError(f"memo key {arg} missing")
                stack.append(memo[arg])
            elif name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                ref = Global(module, attr)
                globals_.append((ref, pos))
                if name == "GLOBAL":
                    stack.append(ref)
                else:
                    stack.append(Obj(ref, tuple(_pop_mark(stack, marks))))
            elif name == "STACK_GLOBAL":
                _require(stack, 2, name)
                attr, module = stack.pop(), stack.pop()
                if not isinstance(module, str) or not isinstance(attr, str):
                    # Built at run time: cannot be vetted, so it is reported as such.
                    ref = Global("<computed>", "<computed>")
                else:
                    ref = Global(module, attr)
                globals_.append((ref, pos))
                stack.append(ref)
            elif name in ("EXT1", "EXT2", "EXT4"):
                ref = Global("<copyreg extension>", str(arg))
                globals_.append((ref, pos))
                stack.append(ref)
            elif name == "REDUCE":
                _require(stack, 2, name)
                args, func = stack.pop(), stack.pop()
                stack.append(Obj(func, args))
            elif name == "NEWOBJ":
                _require(stack, 2, name)
                args, cls = stack.pop(), stack.pop()
                stack.append(Obj(cls, args))
            elif name == "NEWOBJ_EX":
                _require(stack, 3, name)
                kwargs, args, cls = stack.pop(), stack.pop(), stack.pop()
                stack.append(Obj(cls, (args, kwargs)))
            elif name == "OBJ":
                items = _pop_mark(stack, marks)
                if not items:
                    raise PickleError("OBJ without a class")
                stack.append(Obj(items[0], tuple(items[1:])))
            elif name == "BUILD":
                _require(stack, 2, name)
                state = stack.pop()
                target = stack[-1]
                if isinstance(target, Obj):
                    target.state = state
            elif name in ("PERSID", "BINPERSID"):
                if name == "PERSID":
                    pid = Persistent(arg)
                else:
                    _require(stack, 1, name)
                    pid = Persistent(stack.pop())
                persistent.append(pid)
                stack.append(pid)
            elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
                if name == "NEXT_BUFFER":
                    stack.append(_UNKNOWN)
            else:
                raise PickleError(f"unsupported opcode {name}")
    except PickleError:
        raise
    except (ValueError, EOFError, IndexError, TypeError, UnicodeDecodeError) as exc:
        # pickletools raises these on truncated or garbled input.
        raise PickleError(str(exc) or type(exc).__name__) from None
    raise PickleError("ends without STOP (truncated)")


def _append(target: Any, items: list) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif isinstance(target, Obj):
        target.list_items.extend(items)
