# SPDX-License-Identifier: Apache-2.0
"""Constants of maru_shm: mmap flags, defaults, RM wire protocol numbers."""

import os

# Memory protection flags (POSIX mmap values)
PROT_NONE = 0x0
PROT_READ = 0x1
PROT_WRITE = 0x2
PROT_EXEC = 0x4

# Mapping flags (POSIX mmap values)
MAP_SHARED = 0x01
MAP_PRIVATE = 0x02

# Resource manager defaults
DEFAULT_ADDRESS = "127.0.0.1:9850"
DEFAULT_STATE_DIR = os.environ.get("MARU_STATE_DIR", "/var/lib/maru-resourced")
DEFAULT_ALIGN_BYTES = 2 * 1024 * 1024  # 2 MiB: DAX huge-page alignment

# Resource manager TCP protocol (resource-manager-protocol.md §1-2)
RM_MAGIC = 0x4D415255
RM_VERSION = 2
RM_HEADER_SIZE = 12
RM_MAX_PAYLOAD = 8192

MSG_ALLOC_REQ = 1
MSG_ALLOC_RESP = 2
MSG_FREE_REQ = 3
MSG_FREE_RESP = 4
MSG_STATS_REQ = 5
MSG_STATS_RESP = 6
MSG_GET_ACCESS_REQ = 9
MSG_GET_ACCESS_RESP = 10
MSG_ERROR_RESP = 255

CONNECT_TIMEOUT_S = 5.0
RPC_TIMEOUT_S = 10.0
