#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh - the main job: Maru's resource manager on an emulated CXL pool.
#
#   ./dev.sh demo              (builds first, then runs this)
#   BUILD_DIR=build scripts/demo.sh
#
# What it shows, one step per function below:
#   1. start maru-resource-manager on an emulated pool: a sparse 1 GiB file
#      on /dev/shm that is treated exactly like a /dev/daxX.Y device
#   2. pool_monitor: the pool, empty
#   3. a client process allocates 64 MiB, maps the returned path at the
#      returned offset and writes a message into it
#   4. a second process asks for access to the same region with the handle
#      (GET_ACCESS), maps it and reads the message back
#   5. pool_monitor again: the 64 MiB are in use
#   6. the client frees its region
#   7. pool_monitor: the pool is empty again
#   8. start maru-server, the metadata server, on port 5555 if free
#   9. a worker process stores a 1 MiB KV chunk with the Python package
#      (MaruHandler: alloc a page of the pool, write into it, store the key)
#  10. another process retrieves the key and checks the bytes (SHA-256 of
#      the view it gets: the same memory, not a copy)
#  11. the worker deletes its key and exits; maru-server stops
#  12. stop the resource manager cleanly (SIGTERM: checkpoint, exit 0)
# Everything it creates (state dirs, pool file, shared-index file,
# processes) is removed on exit, also on Ctrl-C or on error.
#
# Environment: BUILD_DIR (default <repo>/build), MARU_DEMO_PORT (default
# 9850 if free, else any free port), MARU_DEMO_POOL_SIZE (default 1G).
#
# To extend the demo (maru-server, two processes sharing a KV chunk), add a
# start_*/stop_* pair and a step function, and call them from main().
set -euo pipefail

TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$TOP/build}
RM_BIN=$BUILD_DIR/src/resource_manager/maru-resource-manager
MDS_BIN=$BUILD_DIR/src/metadata_server/maru-server
POOL_MONITOR=$BUILD_DIR/tools/pool_monitor/pool_monitor
PYTHON=/usr/bin/python3
[ -x "$TOP/.venv/bin/python" ] && PYTHON=$TOP/.venv/bin/python

POOL_SIZE=${MARU_DEMO_POOL_SIZE:-1G}
WORK=""		# temp dir: state dir, logs, client I/O
POOL=""		# emulated pool file on /dev/shm
INDEX=""	# maru-server's shared index (a file on /dev/shm)
RM_PID=""	# the resource manager
RM_ADDR=""	# its host:port
CLIENT_PID=""	# the allocating client (step 3)
MDS_PID=""	# the metadata server (steps 8-11)
MDS_URL=""	# its ZeroMQ endpoint
KV_PID=""	# the process that stores a KV chunk (step 9)

# ---------------------------------------------------------------- output
if [ -t 1 ]; then
	BOLD=$'\033[1m' DIM=$'\033[2m' RED=$'\033[31m' OFF=$'\033[0m'
else
	BOLD="" DIM="" RED="" OFF=""
fi
step() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$OFF"; }
note() { printf '%s    %s%s\n' "$DIM" "$*" "$OFF"; }
die() {
	printf '%sdemo: %s%s\n' "$RED" "$*" "$OFF" >&2
	exit 1
}
show() {
	# print a command (program name without its directory), then run it
	local prog=$1
	shift
	printf '%s$ %s %s%s\n' "$DIM" "${prog##*/}" "$*" "$OFF"
	"$prog" "$@"
}

# ---------------------------------------------------------------- setup
check_binaries() {
	local b
	for b in "$RM_BIN" "$POOL_MONITOR" "$MDS_BIN"; do
		[ -x "$b" ] || die "$b is not built (run ./dev.sh setup, or set BUILD_DIR)"
	done
	"$PYTHON" -c 'import maru_core._maru' 2>/dev/null ||
		die "the maru Python package is not installed in $PYTHON (run ./dev.sh setup)"
}

# A free TCP port: 9850 (the default) when nobody uses it.
pick_port() {
	"$PYTHON" - "${MARU_DEMO_PORT:-9850}" <<'PY'
import socket, sys
want = int(sys.argv[1])
s = socket.socket()
try:
    s.bind(("127.0.0.1", want))
except OSError:
    s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
PY
}

# Wait until $1 (host:port) accepts connections while pid $2 lives.
wait_listening() {
	local addr=$1 pid=$2 _
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# ---------------------------------------------------------------- steps
start_resource_manager() {
	local port
	port=$(pick_port)
	RM_ADDR=127.0.0.1:$port
	POOL=/dev/shm/maru-demo-$$
	step "1. start maru-resource-manager on an emulated ${POOL_SIZE} pool"
	note "pool file $POOL (sparse: memory is used only where written)"
	note "state dir $WORK/rm-state, log $WORK/rm.log"
	printf '%s$ %s%s\n' "$DIM" "maru-resource-manager --host 127.0.0.1 --port $port \
--state-dir $WORK/rm-state --pool $POOL --emulate-size $POOL_SIZE" "$OFF"
	"$RM_BIN" --host 127.0.0.1 --port "$port" --state-dir "$WORK/rm-state" \
		--pool "$POOL" --emulate-size "$POOL_SIZE" >"$WORK/rm.log" 2>&1 &
	RM_PID=$!
	if ! wait_listening "$RM_ADDR" "$RM_PID"; then
		cat "$WORK/rm.log" >&2
		die "the resource manager did not start"
	fi
	note "ready: pid $RM_PID listening on $RM_ADDR"
}

show_pools() {
	step "$1"
	show "$POOL_MONITOR" --address "$RM_ADDR"
}

# The client of steps 3 and 6: allocate, map, write, then wait for "free".
# It speaks the resource manager's wire protocol directly (12-byte header,
# little-endian structs: docs/protocol.md) and prints the handle it got.
CLIENT_PY=$(cat <<'PY'
import hashlib, hmac, mmap, os, socket, struct, sys

host, port = sys.argv[1].rsplit(":", 1)
size = int(sys.argv[2])
key = bytes.fromhex(open(sys.argv[3]).read())   # <state-dir>/client.key
sock = socket.create_connection((host, int(port)))
cid = f"{socket.gethostname()}:{os.getpid()}".encode()

def call(mtype, payload):
    sock.sendall(struct.pack("<IHHI", 0x4D415255, 2, mtype, len(payload)) + payload)
    hdr = sock.recv(12, socket.MSG_WAITALL)
    _, _, rtype, n = struct.unpack("<IHHI", hdr)
    return rtype, sock.recv(n, socket.MSG_WAITALL) if n else b""

def mac(role, cn, sn):
    return hmac.new(key, b"maru-rm-auth-1" + role + cn + sn + cid,
                    hashlib.sha256).digest()

# AUTH_REQ: only a client that knows the key may ALLOC and FREE
cn = os.urandom(32)
rtype, r = call(11, struct.pack("<B3x", 1) + cn + struct.pack("<H", len(cid)) + cid)
sn, proof = r[4:36], r[36:68]
if rtype != 12 or not hmac.compare_digest(proof, mac(b"S", cn, sn)):
    sys.exit("the resource manager does not know our key")
rtype, r = call(11, struct.pack("<B3x", 2) + mac(b"C", cn, sn))
if rtype != 12:
    sys.exit("authentication refused")

# ALLOC_REQ: size, path_len 0 (any pool), reserved, client_id, request_id
rtype, r = call(1, struct.pack("<QII", size, 0, 0) +
                struct.pack("<H", len(cid)) + cid + struct.pack("<Q", 1))
status = struct.unpack_from("<i", r)[0]
if rtype != 2 or status != 0:
    sys.exit(f"alloc failed: type {rtype} status {status}")
handle = struct.unpack_from("<4Q", r, 8)
(plen,) = struct.unpack_from("<I", r, 48)
path = r[52:52 + plen].decode()
region_id, offset, length, token = handle

# Map the region exactly as a DAX device would be mapped, and write to it.
fd = os.open(path, os.O_RDWR)
mem = mmap.mmap(fd, length, offset=offset)
msg = f"hello from pid {os.getpid()} via region {region_id}".encode()
mem[:len(msg) + 1] = msg + b"\0"
print(f"allocated region {region_id}: {length >> 20} MiB at offset "
      f"{offset:#x} of {path}", flush=True)
print(f"wrote {msg.decode()!r}", flush=True)
print("handle " + " ".join(str(v) for v in handle), flush=True)

sys.stdin.readline()  # hold the region until the demo says "free"
mem.close()
os.close(fd)
rtype, r = call(3, struct.pack("<4Q", *handle) + struct.pack("<H", len(cid)) +
                cid + struct.pack("<Q", 2))
print(f"freed region {region_id}: status {struct.unpack('<i', r)[0]}", flush=True)
PY
)

# The reader of step 4: GET_ACCESS with the handle, map, read the message.
READER_PY=$(cat <<'PY'
import mmap, os, socket, struct, sys

host, port = sys.argv[1].rsplit(":", 1)
handle = [int(v) for v in sys.argv[2:6]]
sock = socket.create_connection((host, int(port)))
cid = f"{socket.gethostname()}:{os.getpid()}".encode()
sock.sendall(struct.pack("<IHHI", 0x4D415255, 2, 9, 34 + len(cid)) +
             struct.pack("<4Q", *handle) + struct.pack("<H", len(cid)) + cid)
_, _, rtype, n = struct.unpack("<IHHI", sock.recv(12, socket.MSG_WAITALL))
r = sock.recv(n, socket.MSG_WAITALL)
status, plen = struct.unpack_from("<iI", r)
if rtype != 10 or status != 0:
    sys.exit(f"get_access failed: type {rtype} status {status}")
path = r[8:8 + plen].decode()
offset, length = struct.unpack_from("<QQ", r, 8 + plen)
fd = os.open(path, os.O_RDONLY)
mem = mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=offset)
text = mem[:4096].split(b"\0", 1)[0].decode()
print(f"pid {os.getpid()} mapped {path} at offset {offset:#x} and read {text!r}")
PY
)

start_client() {
	step "3. a client allocates 64 MiB, maps it and writes into it"
	mkfifo "$WORK/client.in"
	: >"$WORK/client.out"
	"$PYTHON" -c "$CLIENT_PY" "$RM_ADDR" $((64 << 20)) \
		"$WORK/rm-state/client.key" \
		<"$WORK/client.in" >"$WORK/client.out" 2>&1 &
	CLIENT_PID=$!
	exec 4>"$WORK/client.in"	# keeps the client's stdin open
	# wait for the client to print its handle (or to fail)
	until grep -q '^handle ' "$WORK/client.out"; do
		if ! kill -0 "$CLIENT_PID" 2>/dev/null; then
			sed 's/^/    /' "$WORK/client.out" >&2
			die "the client failed"
		fi
		sleep 0.1
	done
	sed -n '1,2s/^/    /p' "$WORK/client.out"
}

read_from_second_process() {
	local handle
	step "4. a second process maps the same region and reads it"
	handle=$(sed -n 's/^handle //p' "$WORK/client.out")
	note "it only needs the handle (region id, offset, length, auth token)"
	# shellcheck disable=SC2086 # four numbers, split on purpose
	"$PYTHON" -c "$READER_PY" "$RM_ADDR" $handle | sed 's/^/    /'
}

free_client_region() {
	step "6. the client frees its region"
	echo free >&4
	exec 4>&-
	wait "$CLIENT_PID" || die "the client failed: $(cat "$WORK/client.out")"
	CLIENT_PID=""
	sed -n '4,$s/^/    /p' "$WORK/client.out"
}

stop_resource_manager() {
	local rc=0
	step "12. stop the resource manager (SIGTERM: checkpoint, exit 0)"
	kill -TERM "$RM_PID"
	wait "$RM_PID" || rc=$?
	RM_PID=""
	note "exit status $rc; last lines of its log:"
	tail -n 3 "$WORK/rm.log" | sed 's/^/    /'
	[ "$rc" = 0 ] || die "the resource manager exited with $rc"
}

# ------------------------------------------------- KV sharing (steps 8-11)
start_metadata_server() {
	local port
	port=$(MARU_DEMO_PORT=5555 pick_port)
	MDS_URL=tcp://127.0.0.1:$port
	INDEX=/dev/shm/maru-demo-$$-index
	step "8. start maru-server, the metadata server (key -> region, offset, length)"
	printf '%s$ %s%s\n' "$DIM" "maru-server --host 127.0.0.1 --port $port \
--rm-address $RM_ADDR --rm-key-file $WORK/rm-state/client.key \
--shm-index-path $INDEX" "$OFF"
	"$MDS_BIN" --host 127.0.0.1 --port "$port" --rm-address "$RM_ADDR" \
		--rm-key-file "$WORK/rm-state/client.key" \
		--shm-index-path "$INDEX" \
		--state-dir "$WORK/mds-state" >"$WORK/mds.log" 2>&1 &
	MDS_PID=$!
	if ! wait_listening "127.0.0.1:$port" "$MDS_PID"; then
		cat "$WORK/mds.log" >&2
		die "the metadata server did not start"
	fi
	note "ready: pid $MDS_PID listening on $MDS_URL"
	note "shared index $INDEX"
	note "(workers map it read-only and look keys up there, with no request)"
}

# Step 9: one worker stores a KV chunk with the Python API (as LMCache
# does): a page of the shared pool, written in place, registered under a key.
KV_WRITER_PY=$(cat <<'PY'
import hashlib, os, sys
from maru import MaruConfig, MaruHandler

url, key, size = sys.argv[1], sys.argv[2], 1 << 20
cfg = MaruConfig(server_url=url, pool_size=8 << 20, chunk_size_bytes=size)
with MaruHandler(cfg) as handler:
    if not handler.connected:
        sys.exit("connect failed")
    chunk = os.urandom(size)                 # stands in for one KV chunk
    handle = handler.alloc(size=size)        # a page of the shared pool
    handle.buf[:] = chunk                    # written in place
    if not handler.store(key=key, handle=handle):
        sys.exit("store failed")
    print(f"pid {os.getpid()} stored {size >> 10} KiB under {key!r}: region "
          f"{handle.region_id}, page {handle.page_index}", flush=True)
    print("sha256 " + hashlib.sha256(chunk).hexdigest(), flush=True)
    sys.stdin.readline()                     # keep it until the demo says so
    handler.delete(key)
print("deleted the key and closed: its region went back to the pool", flush=True)
PY
)

# Step 10: another process retrieves the chunk: a view of the same memory.
KV_READER_PY=$(cat <<'PY'
import hashlib, os, sys
from maru import MaruConfig, MaruHandler

url, key, want = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = MaruConfig(server_url=url, pool_size=2 << 20, chunk_size_bytes=1 << 20)
with MaruHandler(cfg) as handler:
    info = handler.retrieve(key=key)
    if info is None:
        sys.exit(f"{key!r} not found")
    got = hashlib.sha256(info.view).hexdigest()  # reads the shared pages in place
    local = handler.index_stats()["local_hits"]  # found in the shared index
    print(f"pid {os.getpid()} retrieved {len(info.view) >> 10} KiB of {key!r}: region "
          f"{info.region_id}, page {info.page_index} (a view of the pool, no copy)")
    print("looked up in the shared index, no request to maru-server" if local
          else "looked up with a request to maru-server (no shared index)")
    print(f"sha256 {got}: {'the same bytes' if got == want else 'DIFFERENT BYTES'}")
    sys.exit(0 if got == want else 1)
PY
)

store_kv_chunk() {
	step "9. a worker process stores a 1 MiB KV chunk (Python: alloc, write, store)"
	mkfifo "$WORK/kv.in"
	: >"$WORK/kv.out"
	MARU_LOG_LEVEL=WARNING "$PYTHON" -c "$KV_WRITER_PY" "$MDS_URL" "demo/layer0/chunk0" \
		<"$WORK/kv.in" >"$WORK/kv.out" 2>&1 &
	KV_PID=$!
	exec 5>"$WORK/kv.in"	# keeps the writer's stdin open
	until grep -q '^sha256 ' "$WORK/kv.out"; do
		if ! kill -0 "$KV_PID" 2>/dev/null; then
			sed 's/^/    /' "$WORK/kv.out" >&2
			die "the KV writer failed"
		fi
		sleep 0.1
	done
	sed 's/^/    /' "$WORK/kv.out"
}

retrieve_kv_chunk() {
	local want
	step "10. another process retrieves it and checks the bytes"
	want=$(sed -n 's/^sha256 //p' "$WORK/kv.out")
	MARU_LOG_LEVEL=WARNING "$PYTHON" -c "$KV_READER_PY" "$MDS_URL" \
		"demo/layer0/chunk0" "$want" 2>&1 |
		sed 's/^/    /'
	[ "${PIPESTATUS[0]}" = 0 ] || die "the reader did not get the same bytes"
}

stop_kv_and_metadata_server() {
	step "11. the worker deletes its key and exits; stop maru-server"
	echo done >&5
	exec 5>&-
	wait "$KV_PID" || die "the KV writer failed: $(cat "$WORK/kv.out")"
	KV_PID=""
	sed -n '3,$s/^/    /p' "$WORK/kv.out"
	kill -TERM "$MDS_PID"
	wait "$MDS_PID" || true
	MDS_PID=""
	note "maru-server stopped"
}

# ---------------------------------------------------------------- teardown
cleanup() {
	set +e
	exec 4>&- 2>/dev/null
	exec 5>&- 2>/dev/null
	[ -n "$CLIENT_PID" ] && kill "$CLIENT_PID" 2>/dev/null && wait "$CLIENT_PID"
	[ -n "$KV_PID" ] && kill "$KV_PID" 2>/dev/null && wait "$KV_PID"
	if [ -n "$MDS_PID" ]; then
		kill -TERM "$MDS_PID" 2>/dev/null
		wait "$MDS_PID" 2>/dev/null
	fi
	if [ -n "$RM_PID" ]; then
		kill -TERM "$RM_PID" 2>/dev/null
		wait "$RM_PID" 2>/dev/null
	fi
	[ -n "$POOL" ] && rm -f "$POOL"
	[ -n "$INDEX" ] && rm -f "$INDEX"
	[ -n "$WORK" ] && rm -rf "$WORK"
}

main() {
	check_binaries
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/maru-demo.XXXXXX")
	trap cleanup EXIT
	trap 'exit 130' INT TERM

	start_resource_manager
	show_pools "2. pool_monitor: the emulated pool, nothing allocated yet"
	start_client
	read_from_second_process
	show_pools "5. pool_monitor: 64 MiB of the pool are now in use"
	free_client_region
	show_pools "7. pool_monitor: the pool is free again"
	start_metadata_server
	store_kv_chunk
	retrieve_kv_chunk
	stop_kv_and_metadata_server
	stop_resource_manager

	step "done"
	note "try it yourself (README.md, \"Using it\"):"
	note "  $BUILD_DIR/src/resource_manager/maru-resource-manager --pool /dev/shm/maru-pool --emulate-size 1G &"
	note "  $BUILD_DIR/src/metadata_server/maru-server &"
	note "  then store and retrieve from .venv/bin/python as README.md shows, or"
	note "  point LMCache's Maru backend at it (docs/integrations/lmcache.md)"
	note "  pool_monitor -w 1 / marutop -w 1   (live views of the pool and the server)"
	note "docs: docs/architecture.md, docs/operations.md, docs/python-api.md"
}

main "$@"
