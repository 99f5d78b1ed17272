# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# tests/hw/guest/lib.sh - helpers for the guest scripts (busybox ash).
#
# run.sh copies this file, the guest script and the host-built binaries into
# /test of each guest, plus env.sh with HAVE_<X>=1 for every binary the build
# dir holds and WHY_<X>="..." for those it does not.
#
# Results travel on the serial console as lines the host parses:
#   HWT PASS|FAIL|SKIP <test> <detail>     one per test
#   HWKV <key>=<value>                     values for host-side checks
. ./env.sh
P=/test/maru-hwprobe
RM=/test/maru-resource-manager
MDS=/test/maru-server
EX=/test/maru-example
PM=/test/pool_monitor
RMADDR=127.0.0.1:9850

pass() { echo "HWT PASS $1 ${2:-}"; }
fail() { echo "HWT FAIL $1 ${2:-}"; }
skip() { echo "HWT SKIP $1 ${2:-}"; }
kv() { echo "HWKV $1=$2"; }
note() { echo "hw-note: $*"; }

# field NAME LINE: the value of NAME=... in a probe output line
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }

# dax_data_offset DEV: where byte 0 of /dev/DEV lives in the NVDIMM's
# backing file (the dax resource minus its nd region's resource)
dax_data_offset() {
	r=$(readlink -f "/sys/bus/dax/devices/$1")
	reg=$(echo "$r" | sed -n 's,.*/\(region[0-9]*\)/.*,\1,p')
	echo $(($(cat "/sys/bus/dax/devices/$1/resource") - $(cat "/sys/bus/nd/devices/$reg/resource")))
}

# devdax_labelless: turn the raw namespace of a label-less NVDIMM into
# /dev/dax0.0 (--map=mem: struct pages in guest RAM, never in the shared
# medium), unless the info block already made it one at boot
devdax_labelless() {
	ns=${1:-namespace0.0}
	shift 2>/dev/null
	[ -e "/sys/bus/nd/devices/$ns" ] || { note "no $ns"; return 1; }
	if ndctl list -n "$ns" 2>/dev/null | grep -q '"mode":"devdax"'; then
		return 0
	fi
	ndctl create-namespace -f -e "$ns" -m devdax --map=mem "$@" >/tmp/ndctl.log 2>&1 ||
		{ cat /tmp/ndctl.log; return 1; }
}

# rm_start ARGS...: start the resource manager in the background (log in
# /tmp/rm.log, pid in RM_PID) and wait until it answers STATS.  Its client
# key (<state dir>/client.key) is exported as MARU_RM_KEY_FILE, which
# maru-server, maru-hwprobe and libmaru read to authenticate ALLOC/FREE.
rm_start() {
	_prev=
	for _a in "$@"; do
		[ "$_prev" = --state-dir ] && export MARU_RM_KEY_FILE="$_a/client.key"
		_prev=$_a
	done
	"$RM" "$@" >>/tmp/rm.log 2>&1 &
	RM_PID=$!
	$P rm-wait "$RMADDR" 30 >/dev/null
}

# rm_stop [SIGNAL]: stop it and wait; prints nothing, returns its status
rm_stop() {
	kill -"${1:-TERM}" "$RM_PID" 2>/dev/null
	wait "$RM_PID"
}

# run_for SECS CMD...: run CMD, killed after SECS; returns its status
# (124 on timeout), output to stdout
run_for() {
	t=$1
	shift
	timeout "$t" "$@"
}

# pool_line PATH: the "pool ..." line of the STATS answer for PATH
pool_line() {
	$P rm-stats "$RMADDR" | grep "^pool path=$1 "
}

dump_logs() {
	for f in /tmp/*.log; do
		[ -f "$f" ] || continue
		echo "----- $f (last 300 lines)"
		tail -300 "$f"
	done
	# the console is quiet: clocksource changes, OOM kills and the like
	echo "----- dmesg (last 60 lines)"
	dmesg 2>/dev/null | tail -60
}
