"""Zip archives (torch.save's format): the central directory, bounds, and every member's CRC.

torch.load reads only the members it needs and does not check CRCs, so a flipped byte in a
tensor loads silently. Here every byte of every member is read and its CRC-32 compared, in
streaming chunks (bounded memory), members in parallel threads (zlib releases the GIL).
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ray_doctor.storage import LocalStorage, Storage, StorageError

try:  # zlib-ng's CRC-32 uses the CPU's carry-less multiply: ~3.5x the stdlib's speed here.
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - the stdlib one gives the same answers, slower
    from zlib import crc32

CHUNK = 8 * 1024 * 1024
WINDOW = 32 * 1024 * 1024  # bytes one thread CRCs at a time through mmap
LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # signature ... name length, extra length
LOCAL_SIGNATURE = b"PK\x03\x04"
# A deflated member declared to grow more than MAX_RATIO times is treated as a bomb, but only
# past RATIO_FREE_BYTES: deflate tops out near 1030x on zeros, so a real all-zero tensor (an
# optimizer's fresh moments) reaches the ratio too, and streaming a GiB through the CRC
# costs seconds, not memory. A bomb's point is a size far beyond that.
MAX_RATIO = 1000
RATIO_FREE_BYTES = 1024**3


@dataclass(frozen=True)
class Member:
    name: str
    header_offset: int
    compressed_size: int
    size: int
    crc: int
    method: int


# Sees a member's bytes as the CRC pass reads them: (position in the member, chunk).
Observer = Callable[[int, bytes], None]


class ZipError(Exception):
    """The archive's structure is broken; `reason` is for the report."""


def read_directory(storage: Storage, path: str, size: int) -> list[Member]:
    """Parse the central directory and check every member lies inside the file."""
    try:
        with zipfile.ZipFile(storage.open_random(path, size)) as archive:
            infos = archive.infolist()
    except zipfile.BadZipFile as exc:
        reason = str(exc)
        if "not a zip file" in reason:
            reason = "no zip central directory at the end of the file (truncated or damaged)"
        raise ZipError(reason) from None
    except (OSError, ValueError, EOFError, NotImplementedError) as exc:
        raise ZipError(f"unreadable zip directory: {exc}") from None
    members = [
        Member(i.filename, i.header_offset, i.compress_size, i.file_size, i.CRC, i.compress_type)
        for i in infos
    ]
    for member in members:
        end = member.header_offset + LOCAL_HEADER.size + member.compressed_size
        if end > size:
            raise ZipError(
                f"member {member.name} is declared to end at byte {end}, beyond the file's "
                f"{size} bytes (truncated, or a zip bomb's fake sizes)"
            )
    ordered = sorted(members, key=lambda m: m.header_offset)
    for first, second in itertools.pairwise(ordered):
        if first.header_offset + LOCAL_HEADER.size + first.compressed_size > second.header_offset:
            raise ZipError(f"members {first.name} and {second.name} overlap")
    return members


def data_offset(storage: Storage, path: str, member: Member) -> int:
    """Where a member's bytes start (after its local header)."""
    header = storage.read_range(path, member.header_offset, LOCAL_HEADER.size)
    if len(header) < LOCAL_HEADER.size or header[:4] != LOCAL_SIGNATURE:
        raise ZipError(f"member {member.name}: local header missing at byte {member.header_offset}")
    fields = LOCAL_HEADER.unpack(header)
    name_length, extra_length = fields[-2], fields[-1]
    return member.header_offset + LOCAL_HEADER.size + name_length + extra_length


def iter_range(storage: Storage, path: str, offset: int, length: int) -> Iterator[bytes]:
    while length > 0:
        chunk = storage.read_range(path, offset, min(CHUNK, length))
        if not chunk:
            raise ZipError(f"file ends {length} bytes early")
        yield chunk
        offset += len(chunk)
        length -= len(chunk)


def member_bytes(storage: Storage, path: str, member: Member) -> Iterator[bytes]:
    """The uncompressed bytes of a member, streamed; deflate output is bounded."""
    start = data_offset(storage, path, member)
    raw = iter_range(storage, path, start, member.compressed_size)
    if member.method == zipfile.ZIP_STORED:
        yield from raw
        return
    if member.method != zipfile.ZIP_DEFLATED:
        raise ZipError(f"member {member.name}: compression method {member.method} not supported")
    bomb_limit = max(1, member.compressed_size) * MAX_RATIO
    if member.size > max(bomb_limit, RATIO_FREE_BYTES):
        raise ZipError(
            f"member {member.name} declares {member.size} bytes from {member.compressed_size} "
            f"compressed, more than {MAX_RATIO}x: treated as a zip bomb and not inflated"
        )
    inflater = zlib.decompressobj(-15)
    produced = 0
    for chunk in raw:
        out = inflater.decompress(chunk, CHUNK)
        while True:
            produced += len(out)
            if produced > member.size:
                raise ZipError(
                    f"member {member.name} inflates beyond its declared {member.size} bytes "
                    "(a zip bomb or a damaged stream)"
                )
            yield out
            if not inflater.unconsumed_tail:
                break
            out = inflater.decompress(inflater.unconsumed_tail, CHUNK)
    yield inflater.flush()


def check_member(
    storage: Storage, path: str, member: Member, observe: Observer | None = None
) -> str | None:
    """None when the member's bytes match its CRC and size; else what is wrong. `observe`
    sees each chunk of the member's bytes with its position, as they are read."""
    crc = 0
    total = 0
    try:
        for chunk in member_bytes(storage, path, member):
            crc = crc32(chunk, crc)
            if observe is not None:
                observe(total, chunk)
            total += len(chunk)
    except (ZipError, StorageError, zlib.error) as exc:
        return f"member {member.name}: {getattr(exc, 'reason', exc)}"
    if total != member.size:
        return f"member {member.name}: {total} bytes, the directory says {member.size}"
    if crc != member.crc:
        return (
            f"member {member.name}: CRC-32 {crc:08x} does not match the recorded {member.crc:08x} "
            "(its bytes changed after it was written)"
        )
    return None


def check_members(
    storage: Storage,
    path: str,
    members: list[Member],
    workers: int = 2,
    observers: dict[str, Observer] | None = None,
) -> list[str]:
    """CRC and size of every member; the problems found, in member order.

    Local files: stored members are cut into windows that threads CRC through mmap (no copy;
    zlib releases the GIL), and each member's window CRCs are combined. Remote files: members
    in file order through the storage's read-ahead (a few large ranged GETs per file), each
    chunk also shown to the member's observer, if any (remote files only).
    """
    if isinstance(storage, LocalStorage) and hasattr(mmap, "MAP_POPULATE"):
        return _check_local(storage, path, members, workers)
    if not isinstance(storage, LocalStorage):
        # Remote: members in file order, so the storage's read-ahead serves them in a few
        # large GETs (threads reading far apart would each fetch their own block).
        ordered = sorted(members, key=lambda m: m.header_offset)
        watch = observers or {}
        found = {m.name: check_member(storage, path, m, watch.get(m.name)) for m in ordered}
        return [found[m.name] for m in members if found[m.name]]
    if len(members) <= 1 or workers <= 1:
        results = [check_member(storage, path, m) for m in members]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda m: check_member(storage, path, m), members))
    return [r for r in results if r]


def _check_local(storage: Storage, path: str, members: list[Member], workers: int) -> list[str]:
    problems: dict[str, str] = {}
    windows: list[tuple[Member, int, int]] = []  # (member, file offset, length)
    file_size = os.stat(path).st_size
    for member in members:
        if member.method != zipfile.ZIP_STORED or member.compressed_size != member.size:
            problem = check_member(storage, path, member)
            if problem:
                problems[member.name] = problem
            continue
        try:
            start = data_offset(storage, path, member)
        except (ZipError, StorageError) as exc:
            problems[member.name] = f"member {member.name}: {getattr(exc, 'reason', exc)}"
            continue
        if start + member.size > file_size:
            problems[member.name] = (
                f"member {member.name}: its data would end at byte {start + member.size}, "
                f"past the end of the {file_size}-byte file (truncated or damaged header)"
            )
            continue
        for offset in range(0, max(member.size, 1), WINDOW):
            windows.append((member, start + offset, min(WINDOW, member.size - offset)))
    fd = os.open(path, os.O_RDONLY)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            crcs = list(pool.map(lambda w: _window_crc(fd, w[1], w[2]), windows))
    finally:
        os.close(fd)
    combined: dict[str, int] = {}
    for (member, _, length), crc in zip(windows, crcs, strict=True):
        previous = combined.get(member.name)
        combined[member.name] = crc if previous is None else crc32_combine(previous, crc, length)
    for member in members:
        if member.name in combined and combined[member.name] != member.crc:
            problems[member.name] = (
                f"member {member.name}: CRC-32 {combined[member.name]:08x} does not match the "
                f"recorded {member.crc:08x} (its bytes changed after it was written)"
            )
    return [problems[m.name] for m in members if m.name in problems]


def _window_crc(fd: int, offset: int, length: int) -> int:
    if length <= 0:
        return 0
    aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
    view = mmap.mmap(
        fd,
        length + offset - aligned,
        flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
        prot=mmap.PROT_READ,
        offset=aligned,
    )
    try:
        with memoryview(view) as data:
            return crc32(data[offset - aligned :])
    finally:
        view.close()


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, index = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[index]
        vector >>= 1
        index += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """CRC-32 of A+B from crc(A), crc(B) and len(B): zlib's crc32_combine, which Python's zlib
    module does not expose. It applies len(B) zero bytes to crc(A) in GF(2), by squaring."""
    if length2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if length2 & 1:
            crc1 = _gf2_times(even, crc1)
        length2 >>= 1
        if not length2:
            break
        odd = _gf2_square(even)
        if length2 & 1:
            crc1 = _gf2_times(odd, crc1)
        length2 >>= 1
        if not length2:
            break
    return crc1 ^ crc2


def read_member(storage: Storage, path: str, member: Member, limit: int) -> bytes:
    if member.size > limit:
        raise ZipError(f"member {member.name} is {member.size} bytes, over the {limit} limit")
    return b"".join(member_bytes(storage, path, member))
