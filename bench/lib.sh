# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh - helpers the benchmark scripts share (sourced, not run)
#
#   free_port      print a TCP port free on 127.0.0.1 now
#   wait_port P    wait up to 10 s for something to listen on 127.0.0.1:P,
#                  else say so and exit 1
#   state_arg BIN DIR  "--state-dir DIR" if maru-server BIN has a journal
#                  (an older build, in A/B runs, has none)
#   bench_cleanup  for `trap bench_cleanup EXIT`: kill the daemons in
#                  PIDS, remove POOL, and WORK unless it is OUT (results)
#   start_rm BIN CPU SIZE [ARGS...]
#                  maru-resource-manager BIN on CPU with an emulated pool
#                  of SIZE at POOL, its state and log in WORK; sets RM_PORT
#                  and exports MARU_RM_KEY_FILE (what the servers and
#                  libmaru authenticate with)

free_port() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
	local i
	for i in $(seq 1 100); do
		(exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "nothing listens on $1" >&2
	exit 1
}

bench_cleanup() {
	local p
	# (CONT first: a benchmark may have left one stopped)
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -f "$POOL"
	[ "$OUT" = "$WORK" ] || rm -rf "$WORK"
}

state_arg() {
	"$1" --help 2>&1 | grep -q -- --state-dir && echo "--state-dir $2"
	return 0
}

start_rm() {
	local bin=$1 cpu=$2 size=$3
	shift 3
	RM_PORT=$(free_port)
	export MARU_RM_KEY_FILE="$WORK/rm/client.key"
	taskset -c "$cpu" "$bin" --host 127.0.0.1 --port "$RM_PORT" \
		--state-dir "$WORK/rm" --pool "${POOL:?start_rm: set POOL}" \
		--emulate-size "$size" \
		--log-level error "$@" >"$WORK/rm.log" 2>&1 &
	PIDS+=($!)
	wait_port "$RM_PORT"
}
