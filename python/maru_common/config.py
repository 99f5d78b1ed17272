# SPDX-License-Identifier: Apache-2.0
"""MaruConfig: the handler's configuration (docs/python-api.md).

Field order is part of the contract (positional construction).  Two
environment variables override fields at every construction, even when the
field was passed explicitly: MARU_EAGER_MAP -> eager_map, MARU_STAT ->
enable_stats.  Validation runs after the overrides.
"""

import os
import uuid
from dataclasses import dataclass

DEFAULT_SERVER_URL = "tcp://localhost:5555"
DEFAULT_POOL_SIZE = 100 * 1024 * 1024
DEFAULT_CHUNK_SIZE = 1024 * 1024
DEFAULT_TIMEOUT_MS = 2000
DEFAULT_MAX_INFLIGHT = 64
DEFAULT_RM_ADDRESS = "127.0.0.1:9850"

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
        if (self.curve_server_key is None) != (self.curve_secret_key_file is None):
            raise ValueError(
                "curve_server_key and curve_secret_key_file go together "
                "(CURVE needs both)"
            )

        if self.chunk_size_bytes <= 0:
            raise ValueError(
                f"chunk_size_bytes must be positive, got {self.chunk_size_bytes}"
            )
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

    @property
    def effective_expand_size(self) -> int:
        """Bytes requested per expansion."""
        return self.expand_size if self.expand_size is not None else self.pool_size
