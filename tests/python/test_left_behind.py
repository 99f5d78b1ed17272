# SPDX-License-Identifier: Apache-2.0
"""Nothing left behind (docs/operations.md, "Files the daemons make"):

* maru-server removes its shared-index file at a clean stop (the default
  /dev/shm/maru-index-PORT too); a crash leaves it, and the next start on
  it takes it over;
* a start refused because the port is taken creates nothing: no shared
  index, no journal (maru-server), no pool file and no state directory
  (the resource manager);
* the resource manager takes a host name for --host (as maru-server
  does) and refuses one that does not resolve with exit status 2, before
  touching the pool.
"""
import os
import signal
import socket
import subprocess
import uuid

import pytest

from conftest import (MDS_BIN, RM_BIN, MetadataServer, binary, free_port,
                      wait_port)


def test_clean_stop_removes_the_index_file(rm, start_mds):
    m = start_mds(rm.address)
    assert os.path.exists(m.index_path)
    assert m.stop() == 0
    assert not os.path.exists(m.index_path)
    # a crash leaves it; the next start takes it over, a clean stop
    # removes it again
    m.start()
    assert os.path.exists(m.index_path)
    m.kill()
    assert os.path.exists(m.index_path)
    m.start()
    assert m.stop() == 0
    assert not os.path.exists(m.index_path)


def test_default_index_path_removed(rm, tmp_path):
    """The default file, /dev/shm/maru-index-PORT (no --shm-index-path)."""
    m = MetadataServer(str(tmp_path), rm.address,
                       extra=["--shm-index", "file"])
    path = f"/dev/shm/maru-index-{m.port}"
    try:
        m.start()
        assert os.path.exists(path)
        assert m.stop() == 0
        assert not os.path.exists(path)
    finally:
        m.stop()
        if os.path.exists(path):
            os.unlink(path)


def taken_port():
    """A socket listening on a free port: (the socket, its port)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def test_server_refused_for_its_port_makes_nothing(rm, tmp_path):
    taken, port = taken_port()
    state = tmp_path / "never-made"
    index = f"/dev/shm/maru-test-idx-{uuid.uuid4().hex[:12]}"
    try:
        p = subprocess.run(
            [binary(*MDS_BIN), "--host", "127.0.0.1", "--port", str(port),
             "--rm-address", rm.address, "--rm-key-file", rm.key_file,
             "--state-dir", str(state), "--shm-index-path", index],
            capture_output=True, text=True, timeout=30)
        assert p.returncode == 1, p.stderr
        assert f"cannot bind tcp://127.0.0.1:{port}" in p.stderr
        assert "Address already in use" in p.stderr
        assert not state.exists()
        assert not os.path.exists(index)
    finally:
        taken.close()
        if os.path.exists(index):
            os.unlink(index)


def rm_argv(port, state, pool, host="127.0.0.1"):
    return [binary(*RM_BIN), "--host", host, "--port", str(port),
            "--state-dir", str(state), "--pool", pool,
            "--emulate-size", "64M"]


def test_rm_refused_for_its_port_makes_nothing(tmp_path):
    taken, port = taken_port()
    state = tmp_path / "rm-never-made"
    pool = f"/dev/shm/maru-test-{uuid.uuid4().hex[:12]}"
    try:
        p = subprocess.run(rm_argv(port, state, pool), capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 1, p.stderr
        assert f"port {port} is already in use" in p.stderr
        assert not state.exists() and not os.path.exists(pool)
    finally:
        taken.close()
        if os.path.exists(pool):
            os.unlink(pool)


def test_rm_host_names(tmp_path):
    state = tmp_path / "rm-state"
    pool = f"/dev/shm/maru-test-{uuid.uuid4().hex[:12]}"
    # a name that cannot resolve: bad usage, exit 2, nothing made
    p = subprocess.run(rm_argv(free_port(), state, pool,
                               host="no-such-host.invalid"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "--host no-such-host.invalid" in p.stderr
    assert not state.exists() and not os.path.exists(pool)
    # "localhost" resolves: it listens on 127.0.0.1
    port = free_port()
    proc = subprocess.Popen(rm_argv(port, state, pool, host="localhost"),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        if os.path.exists(pool):
            os.unlink(pool)
