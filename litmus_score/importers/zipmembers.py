"""Where a zip's members lie, and reading one of them alone.

A zip lists its members in its central directory, at its end. A zip cut
short (a copy that stopped, a log whose writer died) or whose directory is
damaged has none to read; every member's data is still preceded by a local
header naming it and giving its sizes, so the members before the damage are
found by walking those headers from the start, as the zip format allows.

A member's location (a Member) is small and plain: a work item can carry
the locations of the members it reads, and a reader opens the file, seeks
to each and reads it, without reading the directory again.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_UTF8_NAME = 0x800
_DATA_DESCRIPTOR = 0x8
_ZIP64_EXTRA = 0x0001
_ZIP64_SIZE = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Member:
    """A member's name and where its bytes are: the offset of its local header."""

    name: str
    offset: int
    method: int
    compressed_size: int
    size: int
    crc: int


@dataclass(frozen=True)
class Members:
    """A zip's members in the order they lie in the file. `damage` is None
    when they come from its directory; else why the directory could not be
    read, the members being those found by their local headers before
    `end`, the first byte no whole member reached. `cut` is the member whose
    data runs past the end of the file, where one does."""

    members: tuple
    damage: str | None = None
    end: int | None = None
    cut: Member | None = None


def _from_directory(archive: zipfile.ZipFile) -> tuple:
    return tuple(Member(info.filename, info.header_offset, info.compress_type, info.compress_size, info.file_size,
                        info.CRC) for info in archive.infolist())


def _name(raw: bytes, flags: int) -> str:
    # As zipfile decodes names: UTF-8 where the flag says so, else code page 437.
    return raw.decode("utf-8" if flags & _UTF8_NAME else "cp437")


def _zip64_sizes(extra: bytes, size: int, compressed: int) -> tuple:
    """(size, compressed size) of a local header whose 32-bit fields say 'see the zip64 extra field'."""
    while len(extra) >= 4:
        kind, length = struct.unpack("<HH", extra[:4])
        if kind == _ZIP64_EXTRA:
            values = list(struct.unpack(f"<{length // 8}Q", extra[4:4 + length - length % 8]))
            if size == _ZIP64_SIZE and values:
                size = values.pop(0)
            if compressed == _ZIP64_SIZE and values:
                compressed = values.pop(0)
            break
        extra = extra[4 + length:]
    return size, compressed


def _scan(handle: BinaryIO, damage: str) -> Members:
    """The members found by walking local headers from the start of the file."""
    file_size = handle.seek(0, 2)
    members: list[Member] = []
    offset = 0
    while True:
        handle.seek(offset)
        fixed = handle.read(_LOCAL_HEADER.size)
        if len(fixed) < _LOCAL_HEADER.size or fixed[:4] != _LOCAL_SIGNATURE:
            return Members(tuple(members), damage, offset)
        _, _, flags, method, _, _, crc, compressed, size, name_length, extra_length = _LOCAL_HEADER.unpack(fixed)
        raw_name, extra = handle.read(name_length), handle.read(extra_length)
        if len(raw_name) < name_length or len(extra) < extra_length or flags & _DATA_DESCRIPTOR:
            # Cut inside the header, or its sizes follow its data: where the next member starts is not known.
            return Members(tuple(members), damage, offset)
        size, compressed = _zip64_sizes(extra, size, compressed)
        member = Member(_name(raw_name, flags), offset, method, compressed, size, crc)
        data_end = offset + _LOCAL_HEADER.size + name_length + extra_length + compressed
        if data_end > file_size:
            return Members(tuple(members), damage, offset, cut=member)
        members.append(member)
        offset = data_end


def members(handle: BinaryIO) -> Members:
    """The members of the zip open as `handle` (seekable, binary): from its
    directory, else, where the directory cannot be read, from its local headers."""
    try:
        with zipfile.ZipFile(handle) as archive:
            return Members(_from_directory(archive))
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        return _scan(handle, f"{type(error).__name__}: {error}")


def read(handle: BinaryIO, member: Member, limit: int) -> bytes:
    """The member's bytes decompressed, at most `limit` + 1 of them (a caller
    bounding a member's size sees that it is over). BadZipFile where no local
    header naming it lies at its offset; a CRC mismatch or bad compressed
    data raise as zipfile raises them."""
    handle.seek(member.offset)
    fixed = handle.read(_LOCAL_HEADER.size)
    if len(fixed) < _LOCAL_HEADER.size or fixed[:4] != _LOCAL_SIGNATURE:
        raise zipfile.BadZipFile(f"{member.name}: no member header at byte {member.offset}")
    flags, name_length, extra_length = _LOCAL_HEADER.unpack(fixed)[2], *_LOCAL_HEADER.unpack(fixed)[9:]
    if _name(handle.read(name_length), flags) != member.name:
        raise zipfile.BadZipFile(f"{member.name}: the member at byte {member.offset} has another name")
    handle.seek(extra_length, 1)
    info = zipfile.ZipInfo(member.name)
    info.compress_type, info.compress_size, info.file_size, info.CRC = (
        member.method, member.compressed_size, member.size, member.crc)
    # What zipfile.ZipFile.open returns once it has found the member's data:
    # it decompresses with the codecs registered with zipfile and checks the CRC.
    with zipfile.ZipExtFile(handle, "r", info) as data:
        return data.read(limit + 1)
