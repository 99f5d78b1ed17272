# SPDX-License-Identifier: Apache-2.0
"""RpcAsyncClient: pipelined DEALER client of the metadata server.

Thread model: one I/O thread owns the DEALER socket (ZeroMQ sockets are not
thread-safe).  Callers hand requests over through a queue and wake the I/O
thread through a pipe; the I/O thread sends [b"", message], reads replies
(taking the last frame), matches them to callers by the header sequence
number and resolves their concurrent.futures.Future.  At most max_inflight
requests are outstanding (a semaphore); a request that gets no reply within
timeout_ms resolves to {"error": "timeout", "success": False} and a late
reply for it is dropped.

Every blocking method of RpcClientBase is available, plus *_async variants
that return a Future of the parsed result.
"""

import logging
import os
import queue
import threading
import time
from concurrent.futures import Future

import zmq

from maru_common.protocol import MessageType
from maru_common.serializer import Serializer

from .rpc_base import (
    DEFAULT_SERVER_URL,
    DEFAULT_TIMEOUT_MS,
    OPS,
    RpcClientBase,
    timeout_reply,
)

logger = logging.getLogger(__name__)

_ASYNC_OPS = (
    "request_alloc", "list_allocations", "return_alloc", "register_kv",
    "lookup_kv", "exists_kv", "delete_kv", "batch_register_kv",
    "batch_lookup_kv", "batch_exists_kv", "heartbeat",
)


class _Pending:
    __slots__ = ("future", "deadline")

    def __init__(self, future: Future, deadline: float):
        self.future = future
        self.deadline = deadline


class RpcAsyncClient(RpcClientBase):
    """Thread-safe pipelined client over a ZeroMQ DEALER socket."""

    def __init__(self, server_url: str = DEFAULT_SERVER_URL,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, max_inflight: int = 64):
        self.server_url = server_url
        self.timeout_ms = timeout_ms
        self.max_inflight = max(1, int(max_inflight))
        self._serializer = Serializer()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(self.max_inflight)
        self._thread: threading.Thread | None = None
        self._context: zmq.Context | None = None
        self._wake_r = self._wake_w = -1
        self._stopping = False
        self._pid = 0

    @property
    def connected(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------
    def connect(self) -> None:
        """Start the I/O thread and its socket (idempotent)."""
        with self._lock:
            if self._thread is not None and self._pid == os.getpid():
                return
            self._context = zmq.Context()
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IDENTITY, os.urandom(8))
            sock.connect(self.server_url)
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            self._stopping = False
            self._pid = os.getpid()
            self._thread = threading.Thread(
                target=self._io_loop, args=(sock,), name="maru-rpc-io", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        """Stop the I/O thread; outstanding requests resolve as timeouts."""
        with self._lock:
            t = self._thread
            if t is None:
                return
            self._stopping = True
            self._wake()
        if t is not threading.current_thread():
            t.join()
        with self._lock:
            self._thread = None
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._wake_r = self._wake_w = -1
            if self._context is not None:
                self._context.term()
                self._context = None

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    # ------------------------------------------------------------------
    def _io_loop(self, sock: zmq.Socket) -> None:
        pending: dict[int, _Pending] = {}
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while True:
                # new requests from callers
                while True:
                    try:
                        seq, msg, p = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        sock.send_multipart([b"", msg], copy=False)
                        pending[seq] = p
                    except zmq.ZMQError as e:
                        logger.debug("send failed: %s", e)
                        self._finish(p, timeout_reply())
                if self._stopping:
                    break
                now = time.monotonic()
                for seq in [s for s, p in pending.items() if p.deadline <= now]:
                    self._finish(pending.pop(seq), timeout_reply())
                wait_ms = None
                if pending:
                    nearest = min(p.deadline for p in pending.values())
                    wait_ms = max(0, int((nearest - now) * 1000) + 1)
                events = dict(poller.poll(wait_ms))
                if self._wake_r in events:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                if sock in events:
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._on_reply(frames[-1], pending)
        finally:
            for p in pending.values():
                self._finish(p, timeout_reply())
            while True:
                try:
                    _, _, p = self._queue.get_nowait()
                except queue.Empty:
                    break
                self._finish(p, timeout_reply())
            sock.close(linger=0)

    def _on_reply(self, body: bytes, pending: dict) -> None:
        try:
            header, payload = self._serializer.decode(body)
        except Exception as e:  # malformed reply: drop, the caller times out
            logger.debug("dropping malformed reply: %s", e)
            return
        p = pending.pop(header.sequence, None)
        if p is None:
            logger.debug("dropping reply for unknown sequence %d", header.sequence)
            return
        self._finish(p, payload)

    def _finish(self, p: _Pending, payload: dict) -> None:
        self._slots.release()
        if not p.future.done():
            p.future.set_result(payload)

    # ------------------------------------------------------------------
    def _submit(self, msg_type: MessageType, data: dict) -> Future:
        """Queue one request; the Future resolves to the reply payload map."""
        if self._thread is None or self._pid != os.getpid():
            self.connect()
        fut: Future = Future()
        deadline = time.monotonic() + self.timeout_ms / 1000.0
        if not self._slots.acquire(timeout=self.timeout_ms / 1000.0):
            fut.set_result(timeout_reply())
            return fut
        seq = self._serializer._next_seq()
        msg = self._serializer.encode(msg_type, data, seq=seq)
        if self._stopping:
            self._slots.release()
            fut.set_result(timeout_reply())
            return fut
        self._queue.put((seq, msg, _Pending(fut, deadline)))
        self._wake()
        return fut

    def _send_request(self, msg_type: MessageType, data: dict) -> dict:
        fut = self._submit(msg_type, data)
        try:
            # The I/O thread resolves every request by its deadline; the extra
            # second only guards against a dead I/O thread.
            return fut.result(timeout=self.timeout_ms / 1000.0 + 1.0)
        except Exception:
            return timeout_reply()

    def _call_async(self, name: str, *args, **kwargs) -> Future:
        msg_type, build, parse = OPS[name]
        raw = self._submit(msg_type, build(*args, **kwargs))
        out: Future = Future()

        def done(f: Future) -> None:
            try:
                out.set_result(parse(f.result()))
            except Exception as e:
                out.set_exception(e)

        raw.add_done_callback(done)
        return out

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _make_async(name: str):
    def method(self, *args, **kwargs) -> Future:
        return self._call_async(name, *args, **kwargs)

    method.__name__ = f"{name}_async"
    method.__doc__ = f"Non-blocking {name}(): a Future of its result."
    return method


for _name in _ASYNC_OPS:
    setattr(RpcAsyncClient, f"{_name}_async", _make_async(_name))
