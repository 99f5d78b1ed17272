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


def _default_state_dir():
    """The resource manager's state directory without --state-dir (as the
    daemon computes it, src/common/statedir.h): /var/lib/maru-resourced
    for root, else $XDG_STATE_HOME/maru/resource-manager or
    ~/.local/state/maru/resource-manager."""
    if os.geteuid() == 0:
        return "/var/lib/maru-resourced"
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "maru", "resource-manager")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "maru",
                        "resource-manager")


DEFAULT_STATE_DIR = os.environ.get("MARU_STATE_DIR") or _default_state_dir()
DEFAULT_ALIGN_BYTES = 2 * 1024 * 1024  # 2 MiB: DAX huge-page alignment

# Client timeouts (libmaru's resource-manager client takes RPC_TIMEOUT_S)
CONNECT_TIMEOUT_S = 5.0
RPC_TIMEOUT_S = 10.0
