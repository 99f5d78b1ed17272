# SPDX-License-Identifier: Apache-2.0
"""RpcClient: lock-step REQ client of the metadata server.

One outstanding request at a time and no internal lock: callers serialise
(python-api.md §4.4).  On a timeout or any ZeroMQ error the REQ socket is
closed and a fresh one is opened, so a late reply to the old socket is
dropped by the server's ROUTER; the call returns the synthetic reply
{"error": "timeout", "success": False}.
"""

import logging

import zmq

from maru_common.protocol import MessageType
from maru_common.serializer import Serializer

from .rpc_base import DEFAULT_SERVER_URL, DEFAULT_TIMEOUT_MS, RpcClientBase, timeout_reply

logger = logging.getLogger(__name__)


class RpcClient(RpcClientBase):
    """Synchronous client over a ZeroMQ REQ socket."""

    def __init__(self, server_url: str = DEFAULT_SERVER_URL,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS):
        self.server_url = server_url
        self.timeout_ms = timeout_ms
        self._context: zmq.Context | None = None
        self._socket: zmq.Socket | None = None
        self._serializer = Serializer()

    @property
    def connected(self) -> bool:
        return self._socket is not None

    def _open_socket(self) -> None:
        assert self._context is not None
        s = self._context.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        s.connect(self.server_url)
        self._socket = s

    def _reset_socket(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        self._open_socket()

    def connect(self) -> None:
        """Create the socket (ZeroMQ connects lazily; no server needed yet)."""
        if self._socket is not None:
            return
        self._context = zmq.Context()
        self._open_socket()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def _send_request(self, msg_type: MessageType, data: dict) -> dict:
        if self._socket is None:
            self.connect()
        assert self._socket is not None
        request = self._serializer.encode(msg_type, data)
        try:
            self._socket.send(request)
            if not self._socket.poll(self.timeout_ms, zmq.POLLIN):
                logger.debug("%s: no reply within %d ms", msg_type.name, self.timeout_ms)
                self._reset_socket()
                return timeout_reply()
            reply = self._socket.recv()
        except zmq.ZMQError as e:
            logger.debug("%s: %s", msg_type.name, e)
            self._reset_socket()
            return timeout_reply()
        _, payload = self._serializer.decode(reply)
        return payload

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
