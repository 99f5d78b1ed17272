# SPDX-License-Identifier: Apache-2.0
"""MaruConfig, logging setup and the import surface (docs/python-api.md).

Pure Python: no daemon needed.
"""
import dataclasses
import importlib
import logging
import subprocess
import sys

import pytest

from maru import MaruConfig


def test_defaults_and_field_order():
    names = [f.name for f in dataclasses.fields(MaruConfig)]
    # upstream's fields in upstream's order (positional arguments keep
    # working), then ours: CURVE's two, both None by default, and the
    # remote path's three (docs/remote.md)
    assert names == [
        "server_url", "instance_id", "pool_size", "chunk_size_bytes",
        "auto_connect", "timeout_ms", "use_async_rpc", "max_inflight",
        "eager_map", "auto_expand", "expand_size", "rm_address", "enable_stats",
        "curve_server_key", "curve_secret_key_file",
        "agent_url", "remote", "agent_curve_key",
    ]
    c = MaruConfig()
    assert c.server_url == "tcp://localhost:5555"
    assert c.pool_size == 100 * 1024 * 1024
    assert c.chunk_size_bytes == 1024 * 1024
    assert c.auto_connect is True
    assert c.timeout_ms == 2000
    assert c.use_async_rpc is True
    assert c.max_inflight == 64
    assert c.eager_map is True
    assert c.auto_expand is True
    assert c.expand_size is None
    assert c.rm_address == "127.0.0.1:9850"
    assert c.enable_stats is False
    assert c.curve_server_key is None and c.curve_secret_key_file is None
    assert c.agent_url is None and c.remote == "auto"
    assert c.agent_curve_key is None


def test_remote_fields(monkeypatch):
    c = MaruConfig(agent_url="tcp://cxl:5570", remote="on")
    assert c.agent_url == "tcp://cxl:5570" and c.remote == "on"
    with pytest.raises(ValueError, match="remote must be 'auto', 'on' or"):
        MaruConfig(remote="yes")
    with pytest.raises(ValueError, match="remote='on' needs agent_url"):
        MaruConfig(remote="on")
    with pytest.raises(ValueError, match="agent_url must be 'tcp://HOST:PORT'"):
        MaruConfig(agent_url="cxl:5570")
    monkeypatch.setenv("MARU_AGENT_URL", "tcp://a:1")
    monkeypatch.setenv("MARU_REMOTE", "ON")
    monkeypatch.setenv("MARU_AGENT_CURVE_KEY", "/k.key")
    c = MaruConfig()
    assert (c.agent_url, c.remote, c.agent_curve_key) == \
        ("tcp://a:1", "on", "/k.key")


def test_instance_id_generated_per_config():
    a, b = MaruConfig(), MaruConfig()
    assert isinstance(a.instance_id, str) and len(a.instance_id) == 36
    assert a.instance_id != b.instance_id
    assert MaruConfig(instance_id="me").instance_id == "me"


def test_positional_construction():
    c = MaruConfig("tcp://h:1", "iid", 4 << 20, 1 << 20, False, 100, False, 8,
                   False, False, None, "10.0.0.1:9850", True)
    assert (c.server_url, c.instance_id, c.pool_size, c.chunk_size_bytes) == \
        ("tcp://h:1", "iid", 4 << 20, 1 << 20)
    assert (c.auto_connect, c.timeout_ms, c.use_async_rpc, c.max_inflight) == \
        (False, 100, False, 8)
    assert (c.eager_map, c.auto_expand, c.rm_address, c.enable_stats) == \
        (False, False, "10.0.0.1:9850", True)


@pytest.mark.parametrize("kw,msg", [
    ({"chunk_size_bytes": 0}, "chunk_size_bytes must be positive, got 0"),
    ({"chunk_size_bytes": -5}, "chunk_size_bytes must be positive, got -5"),
    ({"pool_size": 1000, "chunk_size_bytes": 4096},
     "pool_size (1000) must be >= chunk_size_bytes (4096)"),
    ({"expand_size": 1 << 20, "auto_expand": False},
     "expand_size requires auto_expand=True"),
    ({"expand_size": 100, "chunk_size_bytes": 4096, "pool_size": 8192},
     "expand_size (100) must be >= chunk_size_bytes (4096)"),
])
def test_validation_messages(kw, msg):
    with pytest.raises(ValueError) as ei:
        MaruConfig(**kw)
    assert str(ei.value) == msg


@pytest.mark.parametrize("kw,exc,words", [
    ({"server_url": ""}, ValueError, "MaruConfig.server_url must be 'tcp://HOST:PORT'"),
    ({"server_url": "localhost:5555"}, ValueError, "server_url"),
    ({"server_url": "tcp://h:99999"}, ValueError, "server_url"),
    ({"pool_size": "100X"}, ValueError, "MaruConfig.pool_size must be a positive number of bytes"),
    ({"pool_size": 1.5e9}, ValueError, "pool_size"),
    ({"timeout_ms": -1}, ValueError, "MaruConfig.timeout_ms must be an integer from 1"),
    ({"timeout_ms": 0}, ValueError, "timeout_ms"),
    ({"max_inflight": 0}, ValueError, "MaruConfig.max_inflight"),
    ({"chunk_size_bytes": 1001}, ValueError, "MaruConfig.chunk_size_bytes must be a multiple of 8"),
    ({"rm_address": "nowhere"}, ValueError, "MaruConfig.rm_address must be 'HOST:PORT'"),
    ({"eager_map": 1}, TypeError, "MaruConfig.eager_map must be True or False"),
    ({"instance_id": ""}, ValueError, "MaruConfig.instance_id"),
])
def test_each_field_checked_when_made(kw, exc, words):
    """Every field is checked when the config is made, and the error names
    the field and what it takes."""
    with pytest.raises(exc) as ei:
        MaruConfig(**kw)
    assert words in str(ei.value)


def test_sizes_as_strings():
    c = MaruConfig(pool_size="100M", chunk_size_bytes="64K", expand_size="1G")
    assert (c.pool_size, c.chunk_size_bytes, c.expand_size) == \
        (100 << 20, 64 << 10, 1 << 30)


@pytest.mark.parametrize("raw,val", [
    ("1", True), ("true", True), (" YES ", True), ("On", True),
    ("0", False), ("false", False), ("no", False), (" OFF", False),
])
@pytest.mark.parametrize("var,field", [("MARU_EAGER_MAP", "eager_map"),
                                       ("MARU_STAT", "enable_stats")])
def test_env_overrides_even_explicit(monkeypatch, var, field, raw, val):
    monkeypatch.setenv(var, raw)
    assert getattr(MaruConfig(), field) is val
    assert getattr(MaruConfig(**{field: not val}), field) is val


@pytest.mark.parametrize("var", ["MARU_EAGER_MAP", "MARU_STAT"])
def test_env_bad_value(monkeypatch, var):
    monkeypatch.setenv(var, "maybe")
    with pytest.raises(ValueError) as ei:
        MaruConfig()
    assert str(ei.value) == \
        f"{var} must be one of: 1/0, true/false, yes/no, on/off (got 'maybe')"


def test_env_unset_keeps_argument(monkeypatch):
    monkeypatch.delenv("MARU_EAGER_MAP", raising=False)
    monkeypatch.delenv("MARU_STAT", raising=False)
    c = MaruConfig(eager_map=False, enable_stats=True)
    assert c.eager_map is False and c.enable_stats is True


def test_import_surface():
    import maru
    import maru_common
    import maru_handler
    import maru_handler.memory as mem
    import maru_handler.memory.types as types
    import maru_shm
    import maru_shm.device_scanner as ds
    from maru_handler.rpc_async_client import RpcAsyncClient  # noqa: F401
    from maru_handler.rpc_client import RpcClient  # noqa: F401

    assert maru.__version__ == "0.1.0"
    for name in ("MaruConfig", "MaruHandler", "AllocHandle"):
        assert hasattr(maru, name)
    for name in ("MaruHandler", "OwnedRegionManager", "RpcClient"):
        assert hasattr(maru_handler, name)
    for name in ("AllocHandle", "MemoryInfo", "MappedRegion", "OwnedRegion",
                 "OwnedRegionManager", "PagedMemoryAllocator", "DaxMapper"):
        assert hasattr(mem, name)
    for name in ("MappedRegion", "MemoryInfo", "AllocHandle", "OwnedRegion"):
        assert hasattr(types, name)
    for name in ("MaruConfig", "PROTOCOL_MAGIC", "PROTOCOL_VERSION", "HEADER_SIZE",
                 "MessageType", "MessageFlags", "MessageHeader", "GetUsageResponse",
                 "InstanceUsage", "GetStatsResponse", "KVManagerStats",
                 "AllocationManagerStats", "LookupKVResponse",
                 "BatchLookupKVResponse", "Serializer", "create_serializer",
                 "setup_package_logging"):
        assert hasattr(maru_common, name), name
    for name in ("MaruShmClient", "MaruHandle", "MaruPoolInfo", "DaxType",
                 "PROT_READ", "PROT_WRITE", "MAP_SHARED", "MAP_PRIVATE"):
        assert hasattr(maru_shm, name), name
    assert maru_shm.DEFAULT_ADDRESS == "127.0.0.1:9850"
    assert maru_shm.DEFAULT_STATE_DIR == "/var/lib/maru-resourced"
    assert maru_shm.DEFAULT_ALIGN_BYTES == 2 * 1024 * 1024
    for name in ("scan_dax_devices", "read_device_uuid", "write_device_header",
                 "clear_device_header", "uuid_to_string"):
        assert hasattr(ds, name)


def test_maru_lmcache_import_is_lazy():
    code = ("import sys, maru_lmcache; "
            "print('torch' in sys.modules, 'lmcache' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def _logger_state(env):
    code = ("import logging, maru, maru_shm, maru_handler, maru_common\n"
            "for n in ('maru', 'maru_common', 'maru_handler', 'maru_shm'):\n"
            "    lg = logging.getLogger(n)\n"
            "    print(n, logging.getLevelName(lg.level), lg.propagate, len(lg.handlers))\n"
            "logging.getLogger('maru_handler.x').warning('hello %s', 'there')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)


@pytest.mark.parametrize("env,level", [
    ({}, "INFO"),
    ({"MARU_LOG_LEVEL": "debug"}, "DEBUG"),
    ({"LMCACHE_LOG_LEVEL": "WARNING"}, "WARNING"),
    ({"MARU_LOG_LEVEL": "ERROR", "LMCACHE_LOG_LEVEL": "DEBUG"}, "ERROR"),
    ({"MARU_LOG_LEVEL": "nonsense"}, "INFO"),
])
def test_log_levels_and_format(env, level):
    import os
    import re
    base = {k: v for k, v in os.environ.items()
            if k not in ("MARU_LOG_LEVEL", "LMCACHE_LOG_LEVEL")}
    res = _logger_state({**base, **env})
    lines = res.stdout.split("\n")
    for name, line in zip(("maru", "maru_common", "maru_handler", "maru_shm"), lines):
        assert line == f"{name} {level} False 1"
    if level in ("DEBUG", "INFO", "WARNING"):
        assert re.fullmatch(
            r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] maru WARNING: hello there "
            r"\(<string>:5:maru_handler\.x\)\n", res.stderr), res.stderr
    else:
        assert res.stderr == ""


def test_setup_package_logging_idempotent():
    from maru_common import setup_package_logging
    lg = setup_package_logging("maru_test_pkg")
    setup_package_logging("maru_test_pkg")
    assert len(lg.handlers) == 1 and lg.propagate is False
    importlib.reload(importlib.import_module("maru_common.logging_setup"))
