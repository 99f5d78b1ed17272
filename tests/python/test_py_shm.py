# SPDX-License-Identifier: Apache-2.0
"""maru_shm.MaruShmClient and device_scanner against the real resource
manager (conftest `rm`: an emulated 256 MiB pool on /dev/shm)."""
import os

import pytest

from conftest import free_port
from maru_shm import DaxType, MaruHandle, MaruShmClient, PROT_READ, PROT_WRITE
from maru_shm import device_scanner

MiB = 1024 * 1024


def test_stats_alloc_free(rm):
    c = MaruShmClient(rm.address)
    try:
        assert c.is_running()
        (pool,) = c.stats()
        assert pool.dax_path == rm.pool_path and pool.dax_type == DaxType.DEV_DAX
        assert pool.align_bytes == 2 * MiB and pool.free_size == pool.total_size
        h = c.alloc(3 * MiB)
        assert isinstance(h, MaruHandle) and h.length == 4 * MiB  # rounded to 2 MiB
        assert h.offset >= 2 * MiB                                # after the header unit
        assert c.stats()[0].free_size == pool.total_size - 4 * MiB
        c.free(h)
        assert c.stats()[0].free_size == pool.total_size
        with pytest.raises(RuntimeError, match=r"^Free failed"):
            c.free(h)                                             # gone
    finally:
        c.close()


def test_mmap_shared_between_clients(rm):
    owner, other = MaruShmClient(rm.address), MaruShmClient(rm.address)
    try:
        h = owner.alloc(2 * MiB)
        m1 = owner.mmap(h, PROT_READ | PROT_WRITE)
        assert owner.mmap(h, PROT_READ | PROT_WRITE) is m1        # cached
        m2 = other.mmap(h, PROT_READ | PROT_WRITE)                # via GET_ACCESS
        m1[100:105] = b"hello"
        assert m2[100:105] == b"hello"
        m2[0:3] = b"abc"
        assert m1[0:3] == b"abc"
        forged = MaruHandle(h.region_id, h.offset, h.length, h.auth_token ^ 1)
        third = MaruShmClient(rm.address)
        with pytest.raises(RuntimeError, match=r"\(-13\)"):
            third.mmap(forged, PROT_READ | PROT_WRITE)
        third.close()
        other.munmap(h)
        owner.free(h)
    finally:
        owner.close()
        other.close()


def test_not_running():
    c = MaruShmClient(f"127.0.0.1:{free_port()}")
    assert c.is_running() is False
    with pytest.raises(ConnectionError):
        c.stats()


def test_device_header_roundtrip(tmp_path):
    path = str(tmp_path / "fake-dax")
    with open(path, "wb") as f:
        f.truncate(4 * MiB)
    assert device_scanner.read_device_uuid(path) is None
    u = device_scanner.write_device_header(path, bytes(range(16)))
    assert u == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert device_scanner.read_device_uuid(path) == u
    with open(path, "rb") as f:
        assert f.read(8) == b"MARUDEV\x00"
    device_scanner.clear_device_header(path)
    assert device_scanner.read_device_uuid(path) is None
    assert isinstance(device_scanner.scan_dax_devices(), list)


def test_rm_wrote_device_header(rm):
    # the emulated pool is treated like a device: MARUDEV header at offset 0
    u = device_scanner.read_device_uuid(rm.pool_path)
    assert u is not None and len(u) == 36 and u[14] == "4"
    assert os.path.getsize(rm.pool_path) == 256 * MiB


def test_dax_mapper_standalone(rm):
    from maru_handler.memory import DaxMapper, MappedRegion

    owner = MaruShmClient(rm.address)
    a, b = DaxMapper(rm_address=rm.address), DaxMapper(rm_address=rm.address)
    try:
        h = owner.alloc(2 * MiB)
        ra = a.map_region(h)
        assert isinstance(ra, MappedRegion) and ra.is_mapped and ra.size == 2 * MiB
        assert a.map_region(h) is ra and a.is_mapped(h.region_id)
        rb = b.map_region(h, prefault_pages=False)
        ra.get_buffer_view(4096, 5)[:] = b"maru!"
        assert bytes(b.get_buffer_view(h.region_id, 4096, 5)) == b"maru!"
        assert rb.read_bytes(4096, 5) == b"maru!"
        assert a.get_buffer_view(h.region_id, 2 * MiB - 1, 2) is None
        assert a.get_mapped_region_ids() == [h.region_id]
        assert a.unmap_region(h.region_id) and not a.is_mapped(h.region_id)
        assert a.get_buffer_view(h.region_id, 0, 1) is None
        b.close()
        owner.free(h)
    finally:
        a.close()
        b.close()
        owner.close()
