# SPDX-License-Identifier: Apache-2.0
"""Local DEV_DAX devices and their MARUDEV headers, over libmaru.

The header: docs/hardware.md.

The first 32 bytes of a device hold "MARUDEV\\0", version u32 (1), a 16-byte
UUID and a reserved u32.  A handler scans its own devices at connect to build
uuid -> local path, so that a host seeing the shared device under another
name still opens the right one.  Reading, writing and scanning are libmaru's
(maru_device_*: one alignment unit of the device mapped, as device DAX
requires); this module keeps upstream's function names and return values.
"""

import logging
import uuid as uuid_mod

from maru_core import lib

logger = logging.getLogger(__name__)

HEADER_MAGIC = b"MARUDEV\x00"
HEADER_VERSION = 1
HEADER_SIZE = 32
SYSFS_DAX_DIR = "/sys/bus/dax/devices"


def uuid_to_string(uuid_bytes: bytes) -> str:
    """16 bytes -> 8-4-4-4-12 lowercase hex."""
    return str(uuid_mod.UUID(bytes=bytes(uuid_bytes[:16])))


def read_device_uuid(dax_path: str) -> str | None:
    """UUID string of @dax_path's header, or None without a valid header."""
    try:
        got = lib().device_header_read(dax_path)
    except OSError:
        logger.debug("%s: cannot read the device header", dax_path, exc_info=True)
        return None
    if got is None:
        return None
    uuid, version = got
    if version != HEADER_VERSION:
        logger.warning("%s: unknown device header version %d", dax_path, version)
    return uuid


def scan_dax_devices() -> list[tuple[str, str]]:
    """(uuid, /dev/daxX.Y) of every local DEV_DAX device with a header."""
    found = lib().device_scan()
    for u, path in found:
        logger.debug("%s: uuid %s", path, u)
    return found


def write_device_header(dax_path: str, uuid_bytes: bytes | None = None) -> str:
    """Write a MARUDEV header (new random v4 UUID unless given); return the UUID."""
    if uuid_bytes is None:
        uuid_bytes = uuid_mod.uuid4().bytes
    if len(uuid_bytes) != 16:
        raise ValueError("uuid_bytes must be 16 bytes")
    lib().device_header_write(dax_path, bytes(uuid_bytes))
    return uuid_to_string(uuid_bytes)


def clear_device_header(dax_path: str) -> None:
    """Zero the 32 header bytes of @dax_path."""
    lib().device_header_write(dax_path, None)
