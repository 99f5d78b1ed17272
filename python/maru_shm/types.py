# SPDX-License-Identifier: Apache-2.0
"""Types shared with the resource manager: MaruHandle, MaruPoolInfo, DaxType."""

import struct
from dataclasses import dataclass
from enum import IntEnum

_HANDLE_FMT = "<QQQQ"
HANDLE_SIZE = 32


class DaxType(IntEnum):
    """Kind of pool: a device-DAX character device or an FS-DAX mount."""

    DEV_DAX = 0
    FS_DAX = 1


@dataclass
class MaruHandle:
    """Capability for one region, passed through every layer verbatim.

    The auth token is bound to region_id/offset/length by the resource
    manager: never change a field.  repr() hides the token.
    """

    region_id: int = 0
    offset: int = 0
    length: int = 0
    auth_token: int = 0

    def __repr__(self) -> str:
        return (
            f"MaruHandle(region_id={self.region_id}, offset={self.offset}, "
            f"length={self.length}, auth_token=***)"
        )

    __str__ = __repr__

    def pack(self) -> bytes:
        """32 bytes: four little-endian u64 (the RM wire form)."""
        return struct.pack(
            _HANDLE_FMT, self.region_id, self.offset, self.length, self.auth_token
        )

    @classmethod
    def unpack(cls, data: bytes) -> "MaruHandle":
        if len(data) < HANDLE_SIZE:
            raise ValueError(f"handle needs {HANDLE_SIZE} bytes, got {len(data)}")
        return cls(*struct.unpack_from(_HANDLE_FMT, data))

    def to_dict(self) -> dict:
        return {
            "region_id": self.region_id,
            "offset": self.offset,
            "length": self.length,
            "auth_token": self.auth_token,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "MaruHandle":
        """Build from the metadata protocol's handle map; every key is mandatory."""
        return cls(
            region_id=int(d["region_id"]),
            offset=int(d["offset"]),
            length=int(d["length"]),
            auth_token=int(d["auth_token"]),
        )


@dataclass
class MaruPoolInfo:
    """One pool as reported by the resource manager's STATS."""

    dax_path: str = ""
    dax_type: DaxType = DaxType.DEV_DAX
    total_size: int = 0
    free_size: int = 0
    align_bytes: int = 0

    def to_dict(self) -> dict:
        return {
            "dax_path": self.dax_path,
            "dax_type": int(self.dax_type),
            "total_size": self.total_size,
            "free_size": self.free_size,
            "align_bytes": self.align_bytes,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "MaruPoolInfo":
        dt = int(d.get("dax_type", 0))
        try:
            dax_type = DaxType(dt)
        except ValueError:
            dax_type = dt
        return cls(
            dax_path=d.get("dax_path", ""),
            dax_type=dax_type,
            total_size=int(d.get("total_size", 0)),
            free_size=int(d.get("free_size", 0)),
            align_bytes=int(d.get("align_bytes", 0)),
        )
