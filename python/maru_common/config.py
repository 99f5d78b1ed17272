# SPDX-License-Identifier: Apache-2.0
"""MaruConfig: the handler's configuration (docs/python-api.md).

Field order is part of the contract (positional construction).  Two
environment variables override fields at every construction, even when the
field was passed explicitly: MARU_EAGER_MAP -> eager_map, MARU_STAT ->
enable_stats.  Validation runs after the overrides.
"""

import os
import re
import uuid
from dataclasses import dataclass

DEFAULT_SERVER_URL = "tcp://localhost:5555"
DEFAULT_POOL_SIZE = 100 * 1024 * 1024
DEFAULT_CHUNK_SIZE = 1024 * 1024
DEFAULT_TIMEOUT_MS = 2000
DEFAULT_MAX_INFLIGHT = 64
DEFAULT_RM_ADDRESS = "127.0.0.1:9850"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", re.I)
_URL_RE = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})")
_ADDR_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_env_bool(name: str) -> bool | None:
    """Read boolean environment variable @name.

    Return None when it is unset; raise ValueError for an unknown spelling.
    """
    raw = os.environ.get(name)
    if raw is None:
        return None
    val = raw.strip().lower()
    if val in _TRUE:
        return True
    if val in _FALSE:
        return False
    raise ValueError(
        f"{name} must be one of: 1/0, true/false, yes/no, on/off (got '{raw}')"
    )


@dataclass
class MaruConfig:
    """Configuration of one MaruHandler.

    Attributes:
        server_url: metadata server ZeroMQ endpoint.
        instance_id: owner id of this handler's regions (None: random UUID).
        pool_size: bytes requested for the first region.
        chunk_size_bytes: page size; one KV chunk per page.
        auto_connect: connect when entering a ``with`` block.
        timeout_ms: RPC timeout in milliseconds.
        use_async_rpc: pipelined DEALER client (True) or lock-step REQ client.
        max_inflight: pipelined client's cap on outstanding requests.
        eager_map: map other instances' regions at connect.
        auto_expand: request another region when the pages run out.
        expand_size: bytes per expansion (None: pool_size).
        rm_address: resource manager host:port, used only when the metadata
            server's HANDSHAKE does not name one.
        enable_stats: report per-operation timings to the metadata server.
        curve_server_key: CURVE (a maru-server run with
            --curve-secret-key-file): the server's public key, 40 Z85
            characters or the path of its public certificate
            (maru-keygen NAME writes NAME.key).  Environment:
            MARU_CURVE_SERVER_KEY.  Not upstream's.
        curve_secret_key_file: CURVE: this client's secret certificate
            (NAME.key_secret); both CURVE fields or neither.
            Environment: MARU_CURVE_SECRET_KEY_FILE.  Not upstream's.
        agent_url: the maru-agent ('tcp://HOST:PORT') through which a
            host that cannot map the pool moves its bytes over UCX
            (docs/remote.md).  Environment: MARU_AGENT_URL.  Not
            upstream's.
        remote: 'auto' (remote when agent_url is set and the pool cannot
            be mapped here), 'on' or 'off'.  Environment: MARU_REMOTE.
        agent_curve_key: the agent's CURVE public key (Z85 or a
            certificate path); None: curve_server_key.  Environment:
            MARU_AGENT_CURVE_KEY.
    """

    server_url: str = DEFAULT_SERVER_URL
    instance_id: str | None = None
    pool_size: int = DEFAULT_POOL_SIZE
    chunk_size_bytes: int = DEFAULT_CHUNK_SIZE
    auto_connect: bool = True
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    use_async_rpc: bool = True
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    eager_map: bool = True
    auto_expand: bool = True
    expand_size: int | None = None
    rm_address: str = DEFAULT_RM_ADDRESS
    enable_stats: bool = False
    curve_server_key: str | None = None
    curve_secret_key_file: str | None = None
    agent_url: str | None = None
    remote: str = "auto"
    agent_curve_key: str | None = None

    def __post_init__(self) -> None:
        if self.instance_id is None:
            self.instance_id = str(uuid.uuid4())

        env = parse_env_bool("MARU_EAGER_MAP")
        if env is not None:
            self.eager_map = env
        env = parse_env_bool("MARU_STAT")
        if env is not None:
            self.enable_stats = env
        # CURVE for callers that cannot pass it (LMCache's backend)
        if os.environ.get("MARU_CURVE_SERVER_KEY"):
            self.curve_server_key = os.environ["MARU_CURVE_SERVER_KEY"]
        if os.environ.get("MARU_CURVE_SECRET_KEY_FILE"):
            self.curve_secret_key_file = os.environ["MARU_CURVE_SECRET_KEY_FILE"]
        # the remote path, for callers that cannot pass it (LMCache)
        if os.environ.get("MARU_AGENT_URL"):
            self.agent_url = os.environ["MARU_AGENT_URL"]
        if os.environ.get("MARU_REMOTE"):
            self.remote = os.environ["MARU_REMOTE"].strip().lower()
        if os.environ.get("MARU_AGENT_CURVE_KEY"):
            self.agent_curve_key = os.environ["MARU_AGENT_CURVE_KEY"]
        if (self.curve_server_key is None) != (self.curve_secret_key_file is None):
            raise ValueError(
                "curve_server_key and curve_secret_key_file go together "
                "(CURVE needs both)"
            )

        self._check_fields()
        if self.pool_size < self.chunk_size_bytes:
            raise ValueError(
                f"pool_size ({self.pool_size}) must be >= "
                f"chunk_size_bytes ({self.chunk_size_bytes})"
            )
        if self.expand_size is not None:
            if not self.auto_expand:
                raise ValueError("expand_size requires auto_expand=True")
            if self.expand_size < self.chunk_size_bytes:
                raise ValueError(
                    f"expand_size ({self.expand_size}) must be >= "
                    f"chunk_size_bytes ({self.chunk_size_bytes})"
                )

    def _check_fields(self) -> None:
        """Each field as it is given: a clear error naming the field and
        what it takes (sizes may be given as "100M", "1G": K/M/G/T are
        powers of 1024)."""
        url = self.server_url
        if not isinstance(url, str) or not _URL_RE.fullmatch(url) or \
                not 0 < int(_URL_RE.fullmatch(url).group(2)) < 65536:
            raise ValueError(
                f"MaruConfig.server_url must be 'tcp://HOST:PORT' "
                f"(e.g. 'tcp://localhost:5555'), not {url!r}")
        if not isinstance(self.instance_id, str) or not self.instance_id:
            raise ValueError(
                f"MaruConfig.instance_id must be a non-empty string (or "
                f"None: a random UUID), not {self.instance_id!r}")
        self.pool_size = _size("pool_size", self.pool_size)
        self.chunk_size_bytes = _size("chunk_size_bytes",
                                      self.chunk_size_bytes)
        if self.chunk_size_bytes % 8:
            raise ValueError(
                f"MaruConfig.chunk_size_bytes must be a multiple of 8 "
                f"(each page starts aligned for tensors of any dtype), "
                f"not {self.chunk_size_bytes}")
        if self.expand_size is not None:
            self.expand_size = _size("expand_size", self.expand_size)
        for name, lo, hi in (("timeout_ms", 1, 2**31 - 1),
                             ("max_inflight", 1, 65536)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or \
                    not lo <= v <= hi:
                raise ValueError(
                    f"MaruConfig.{name} must be an integer from {lo} to "
                    f"{hi}, not {v!r}")
        for name in ("auto_connect", "use_async_rpc", "eager_map",
                     "auto_expand", "enable_stats"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise TypeError(
                    f"MaruConfig.{name} must be True or False, not {v!r}")
        a = self.agent_url
        if a is not None and (
                not isinstance(a, str) or not _URL_RE.fullmatch(a) or
                not 0 < int(_URL_RE.fullmatch(a).group(2)) < 65536):
            raise ValueError(
                f"MaruConfig.agent_url must be 'tcp://HOST:PORT' (e.g. "
                f"'tcp://cxl-host:5570') or None, not {a!r}")
        if self.remote not in ("auto", "on", "off"):
            raise ValueError(
                f"MaruConfig.remote must be 'auto', 'on' or 'off', not "
                f"{self.remote!r}")
        if self.remote == "on" and a is None:
            raise ValueError(
                "MaruConfig.remote='on' needs agent_url (the maru-agent "
                "on a host that maps the pool)")
        addr = self.rm_address
        if not isinstance(addr, str) or not _ADDR_RE.fullmatch(addr) or \
                not 0 < int(_ADDR_RE.fullmatch(addr).group(2)) < 65536:
            raise ValueError(
                f"MaruConfig.rm_address must be 'HOST:PORT' (e.g. "
                f"'127.0.0.1:9850'), not {addr!r}")

    @property
    def effective_expand_size(self) -> int:
        """Bytes requested per expansion."""
        return self.expand_size if self.expand_size is not None else self.pool_size


def _size(name: str, v) -> int:
    """A byte count: a positive int, or a string such as "100M"."""
    if isinstance(v, str):
        m = _SIZE_RE.fullmatch(v)
        if m:
            v = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if isinstance(v, int) and not isinstance(v, bool) and v <= 0:
        raise ValueError(f"{name} must be positive, got {v}")  # upstream's
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(
            f"MaruConfig.{name} must be a positive number of bytes (an int, "
            f"or a size such as '100M' or '1G'), not {v!r}")
    return v
