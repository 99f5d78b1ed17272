# bench/lib.sh - helpers the benchmark scripts share (sourced, not run)
#
#   free_port      print a TCP port free on 127.0.0.1 now
#   wait_port P    wait up to 10 s for something to listen on 127.0.0.1:P,
#                  else say so and exit 1
#   state_arg BIN DIR  "--state-dir DIR" if maru-server BIN has a journal
#                  (an older build, in A/B runs, has none)
#   bench_cleanup  for `trap bench_cleanup EXIT`: kill the daemons in
#                  PIDS, remove POOL, and WORK unless it is OUT (results)

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
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -f "$POOL"
	[ "$OUT" = "$WORK" ] || rm -rf "$WORK"
}

state_arg() {
	"$1" --help 2>&1 | grep -q -- --state-dir && echo "--state-dir $2"
	return 0
}
