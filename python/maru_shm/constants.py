# SPDX-License-Identifier: Apache-2.0
"""Constants of maru_shm: mmap flags, defaults, timeouts."""

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

# Client timeouts (libmaru's resource-manager client takes RPC_TIMEOUT_S)
CONNECT_TIMEOUT_S = 5.0
RPC_TIMEOUT_S = 10.0
