# SPDX-License-Identifier: Apache-2.0
"""Local DEV_DAX devices and their MARUDEV headers (RM spec §8.2).

The first 32 bytes of a device hold "MARUDEV\\0", version u32 (1), a 16-byte
UUID and a reserved u32.  A handler scans its own devices at connect to build
uuid -> local path, so that a host seeing the shared device under another
name still opens the right one.
"""

import logging
import mmap
import os
import struct
import uuid as uuid_mod

logger = logging.getLogger(__name__)

HEADER_MAGIC = b"MARUDEV\x00"
HEADER_VERSION = 1
HEADER_SIZE = 32
_HEADER_FMT = "<8sI16sI"
_DEFAULT_ALIGN = 2 * 1024 * 1024
SYSFS_DAX_DIR = "/sys/bus/dax/devices"


def uuid_to_string(uuid_bytes: bytes) -> str:
    """16 bytes -> 8-4-4-4-12 lowercase hex."""
    h = bytes(uuid_bytes[:16]).hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _align_of(path: str) -> int:
    name = os.path.basename(path)
    try:
        with open(f"{SYSFS_DAX_DIR}/{name}/align") as f:
            return int(f.read().strip()) or _DEFAULT_ALIGN
    except (OSError, ValueError):
        return _DEFAULT_ALIGN


def _map_len(fd: int, path: str) -> int:
    """One alignment unit, clamped to the size of a regular file."""
    n = _align_of(path)
    size = os.fstat(fd).st_size
    if 0 < size < n:
        n = size
    return n


def read_device_uuid(dax_path: str) -> str | None:
    """UUID string of @dax_path's header, or None without a valid header."""
    try:
        fd = os.open(dax_path, os.O_RDONLY)
    except OSError:
        return None
    try:
        mm = mmap.mmap(fd, _map_len(fd, dax_path), mmap.MAP_SHARED, mmap.PROT_READ)
        try:
            data = mm[:HEADER_SIZE]
        finally:
            mm.close()
    except (OSError, ValueError):
        logger.debug("%s: cannot read the device header", dax_path, exc_info=True)
        return None
    finally:
        os.close(fd)
    if len(data) < HEADER_SIZE:
        return None
    magic, version, raw, _ = struct.unpack(_HEADER_FMT, data)
    if magic != HEADER_MAGIC:
        return None
    if version != HEADER_VERSION:
        logger.warning("%s: unknown device header version %d", dax_path, version)
    return uuid_to_string(raw)


def scan_dax_devices() -> list[tuple[str, str]]:
    """(uuid, /dev/daxX.Y) of every local DEV_DAX device with a header."""
    try:
        names = sorted(os.listdir(SYSFS_DAX_DIR))
    except OSError:
        return []
    found = []
    for name in names:
        path = f"/dev/{name}"
        if not os.path.exists(path):
            continue
        u = read_device_uuid(path)
        if u:
            found.append((u, path))
            logger.debug("%s: uuid %s", path, u)
    return found


def _write_header_bytes(dax_path: str, data: bytes) -> None:
    fd = os.open(dax_path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, _map_len(fd, dax_path), mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            mm[:HEADER_SIZE] = data
            try:
                mm.flush()
            except OSError:
                pass  # device DAX may refuse msync
        finally:
            mm.close()
    finally:
        os.close(fd)


def write_device_header(dax_path: str, uuid_bytes: bytes | None = None) -> str:
    """Write a MARUDEV header (new random v4 UUID unless given); return the UUID."""
    if uuid_bytes is None:
        uuid_bytes = uuid_mod.uuid4().bytes
    if len(uuid_bytes) != 16:
        raise ValueError("uuid_bytes must be 16 bytes")
    _write_header_bytes(
        dax_path, struct.pack(_HEADER_FMT, HEADER_MAGIC, HEADER_VERSION, uuid_bytes, 0)
    )
    return uuid_to_string(uuid_bytes)


def clear_device_header(dax_path: str) -> None:
    """Zero the 32 header bytes of @dax_path."""
    _write_header_bytes(dax_path, bytes(HEADER_SIZE))
