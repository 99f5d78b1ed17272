#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/hw/run.sh - Maru on a real /dev/dax: the device-DAX tests, in QEMU.
#
# Each test group boots throw-away qemu guests (TCG) with an emulated NVDIMM
# (or CXL type-3 device) turned into /dev/daxX.Y by ndctl, copies the
# host-built binaries in, runs a busybox script that drives them, and checks
# the backing file from the host afterwards.  The kernel, busybox, ndctl and
# qemu come from Debian packages, fetched at test time and cached (see
# lib/build-image.sh); nothing downloaded is committed.  docs/hardware.md
# explains the set-up and every test.
#
#   tests/hw/run.sh [GROUP...]      all groups, or only these
#
# Environment:
#   MARU_BUILD_DIR    build dir with the binaries (default <repo>/build)
#   MARU_HW_OUT       logs and backing files (default $MARU_BUILD_DIR/hw)
#   MARU_HW_JOBS      groups run at once (default 2)
#   MARU_HW_CACHE     download/image cache (default ~/.cache/maru-hw)
#   MARU_HW_KEEP=1    keep the backing files
#   MARU_HW_GUEST_TIMEOUT  per-guest wall-clock limit, seconds (default 240)
#   MARU_HW_DEADLINE  the whole run's limit, seconds (default 540): no guest
#                     is booted or left running past it
#
# Output: one line per test (PASS/FAIL/SKIP name: detail), then the summary
#   hw: N passed, M failed, K skipped
# Exit: 1 if any test failed, else 0.  When qemu cannot run here every test
# is reported SKIPPED with the reason (never passed).
set -uo pipefail
HW=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HW/../.." && pwd)
. "$HW/lib/common.sh"
BUILD=$(cd "${MARU_BUILD_DIR:-$TOP/build}" 2>/dev/null && pwd) || BUILD=${MARU_BUILD_DIR:-$TOP/build}
OUT=${MARU_HW_OUT:-$BUILD/hw}
JOBS=${MARU_HW_JOBS:-2}
GUEST_TMO=${MARU_HW_GUEST_TIMEOUT:-240}
DEADLINE=${MARU_HW_DEADLINE:-540}
RG=$HW/lib/run-guest.sh
T0=$(date +%s)

# longest first, so that the parallel slots finish at about the same time
ALL_GROUPS=(twohost restart discovery datapath failloud cxl)
for g in "${ALL_GROUPS[@]}"; do . "$HW/groups/$g.sh"; done
if [ $# -gt 0 ]; then GROUPS_RUN=("$@"); else GROUPS_RUN=("${ALL_GROUPS[@]}"); fi

rm -rf "$OUT/results" "$OUT/logs"
mkdir -p "$OUT/results" "$OUT/logs" "$OUT/work"

# ---- results ----
# res STATUS NAME DETAIL: record one result of the current group ($RES)
res() { printf '%s %s %s\n' "$1" "$2" "${3:-}" >>"$RES"; }
pass() { res PASS "$1" "${2:-}"; }
fail() { res FAIL "$1" "${2:-}"; }
skip() { res SKIP "$1" "${2:-}"; }

# collect LOG: the HWT lines a guest printed become results
collect() {
	sed -n 's/^HWT \(PASS\|FAIL\|SKIP\) \([^ ]*\) *\(.*\)$/\1 \2 \3/p' "$1" >>"$RES" 2>/dev/null
}

# kvget LOG KEY: a HWKV value the guest printed (last one wins)
kvget() { sed -n "s/^HWKV $2=//p" "$1" 2>/dev/null | tail -1; }

# has_result NAME: the current group already reported NAME
has_result() { grep -q "^[A-Z]* $1 " "$RES" 2>/dev/null; }

# skip_all GROUP REASON: every test of GROUP is skipped for REASON
skip_all() {
	local t tests="TESTS_$1[@]"
	for t in "${!tests}"; do has_result "$t" || skip "$t" "$2"; done
}

# fail_missing GROUP DETAIL: tests the guests never reported fail
fail_missing() {
	local t tests="TESTS_$1[@]"
	for t in "${!tests}"; do has_result "$t" || fail "$t" "no result: $2"; done
}

# ---- binaries under test ----
PROBE=$BUILD/tests/hw/maru-hwprobe
BIN_RM=$BUILD/src/resource_manager/maru-resource-manager
BIN_MDS=$BUILD/src/metadata_server/maru-server
BIN_PM=$BUILD/tools/pool_monitor/pool_monitor
BIN_EX=""
for f in "$BUILD"/examples/maru-example "$BUILD"/examples/store_retrieve; do
	[ -x "$f" ] && { BIN_EX=$f; break; }
done
BIN_HOLD=$BUILD/tests/hw/maru-hwhold

# why_missing NAME PATH OWNER: empty when PATH is an executable, else why
why_missing() {
	[ -x "$2" ] && return 0
	echo "$1 not built (${2#"$TOP"/} missing; engineer \"$3\")"
}
WHY_RM=$(why_missing maru-resource-manager "$BIN_RM" rm)
WHY_MDS=$(why_missing maru-server "$BIN_MDS" mds)
WHY_PM=$(why_missing pool_monitor "$BIN_PM" tools)
WHY_EX=$([ -n "$BIN_EX" ] || echo "maru-example not built (examples/store_retrieve.c, engineer \"libmaru\")")
WHY_HOLD=$(why_missing maru-hwhold "$BIN_HOLD" "hw: needs libmaru")

# guest NAME SCRIPT [run-guest options...]: boot a guest running
# guest/SCRIPT with lib.sh, env.sh, the probe and every available binary in
# /test; console log in $OUT/logs/NAME.log.  Returns the script's status.
guest() {
	local name=$1 script=$2 d=$OUT/work/$1.files f tmo
	shift 2
	# never past the run's deadline: a hung guest must not stall CI
	tmo=$((DEADLINE - ($(date +%s) - T0)))
	if [ "$tmo" -lt 30 ]; then
		echo "guest $name not booted: the run's ${DEADLINE}s deadline is reached" >>"$W/guest-errors"
		return 124
	fi
	[ "$tmo" -gt "$GUEST_TMO" ] && tmo=$GUEST_TMO
	rm -rf "$d" && mkdir -p "$d"
	{
		for v in RM MDS PM EX HOLD; do
			local why="WHY_$v"
			if [ -z "${!why}" ]; then echo "HAVE_$v=1"; else
				echo "HAVE_$v=0"; printf 'WHY_%s=%q\n' "$v" "${!why}"; fi
		done
		echo "GUEST_NAME=$name"
		[ -n "${GUEST_ENV:-}" ] && printf '%s\n' "$GUEST_ENV"
	} >"$d/env.sh"
	local files=(-f "$HW/guest/lib.sh" -f "$d/env.sh" -f "$PROBE")
	for f in "$BIN_RM" "$BIN_MDS" "$BIN_PM" "$BIN_HOLD"; do
		[ -x "$f" ] && files+=(-f "$f")
	done
	if [ -n "$BIN_EX" ]; then
		cp "$BIN_EX" "$d/maru-example" && files+=(-f "$d/maru-example")
	fi
	"$RG" -n "$name" -o "$OUT/logs" -s "$HW/guest/$script" "${files[@]}" \
		-t "$tmo" "$@" 2>>"$OUT/logs/$name.err"
	f=$?
	# a guest that did not finish its script: the reason for "no result"
	if [ $f != 0 ]; then
		[ -s "$OUT/logs/$name.err" ] || echo "script exit status $f" >>"$OUT/logs/$name.err"
		sed "s/^/guest $name: /" "$OUT/logs/$name.err" >>"$W/guest-errors"
	fi
	return $f
}

# free_udp_port: a UDP port nobody uses on 127.0.0.1 right now
free_udp_port() {
	/usr/bin/python3 -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# ---- preflight: can qemu run here? ----
preflight() {
	local m
	if ! command -v "$HW_QEMU" >/dev/null || [ ! -x /bin/busybox ] ||
		[ -n "$(hw_missing_packages)" ]; then
		mkdir -p "$HW_CACHE"
		m=$(hw_missing_packages | tr '\n' ' ')
		[ -z "$m" ] || hw_log "installing $m"
		if ! hw_apt_install "${HW_DEB_PACKAGES[@]}"; then
			m=$(tail -1 "$HW_CACHE/apt.log" 2>/dev/null)
			echo "qemu/busybox/ndctl packages not installable here (${m:-apt-get failed})"
			return 1
		fi
	fi
	if ! command -v "$HW_QEMU" >/dev/null; then
		echo "$HW_QEMU not available here"
		return 1
	fi
	if ! m=$("$HW/lib/build-image.sh" 2>&1); then
		echo "guest kernel/initramfs not buildable from Debian packages: $(echo "$m" | tail -1)"
		return 1
	fi
	# can qemu run a guest here at all?  A qemu that does not start, or a
	# kernel that prints nothing, means "cannot run": skip.  A guest that
	# boots but does not finish its script is the harness's fault: fail
	# (the groups will report it).
	printf 'exit 0\n' >"$OUT/work/smoke.sh"
	if ! "$RG" -n smoke -o "$OUT/logs" -s "$OUT/work/smoke.sh" -t 120 2>"$OUT/logs/smoke.err" &&
		! grep -q 'maru-hw: .* up at\|Kernel panic\|reboot: Power down' "$OUT/logs/smoke.log" 2>/dev/null; then
		echo "qemu cannot boot a guest here: $( (cat "$OUT/logs/smoke.err"; tail -3 "$OUT/logs/smoke.log" 2>/dev/null) | tr '\n' ' ' | cut -c1-300)"
		return 1
	fi
	if [ ! -x "$PROBE" ] && [ -f "$BUILD/CMakeCache.txt" ]; then
		cmake --build "$BUILD" --target maru-hwprobe >"$OUT/logs/probe-build.log" 2>&1
	fi
	return 0
}

ORDER=()
for g in "${GROUPS_RUN[@]}"; do
	declare -F "group_$g" >/dev/null || { echo "hw: unknown group $g" >&2; exit 2; }
	ORDER+=("$g")
done

if ! why=$(preflight); then
	for g in "${ORDER[@]}"; do RES=$OUT/results/$g; skip_all "$g" "$why"; done
elif [ ! -x "$PROBE" ]; then
	for g in "${ORDER[@]}"; do
		RES=$OUT/results/$g
		fail_missing "$g" "maru-hwprobe not built (${PROBE#"$TOP"/}, see $OUT/logs/probe-build.log)"
	done
else
	hw_log "guests: $(cat "$HW_CACHE/kver"), logs in $OUT/logs, $JOBS groups at a time"
	running=0
	for g in "${ORDER[@]}"; do
		if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
		(
			RES=$OUT/results/$g
			W=$OUT/work/$g
			rm -rf "$W" && mkdir -p "$W"
			t=$(date +%s)
			"group_$g"
			fail_missing "$g" "$(tail -1 "$W/guest-errors" 2>/dev/null || true) (logs: $OUT/logs)"
			[ "${MARU_HW_KEEP:-0}" = 1 ] || rm -f "$W"/*.img
			hw_log "group $g done in $(($(date +%s) - t))s"
		) &
		running=$((running + 1))
	done
	wait
fi

# ---- report ----
np=0 nf=0 ns=0
for g in "${ORDER[@]}"; do
	while read -r st name detail; do
		[ -n "$st" ] || continue
		case $st in PASS) np=$((np + 1)) ;; FAIL) nf=$((nf + 1)) ;; SKIP) ns=$((ns + 1)) ;; esac
		printf '%-4s %s%s\n' "$st" "$name" "${detail:+: $detail}"
	done <"$OUT/results/$g"
done
echo "hw: $np passed, $nf failed, $ns skipped ($(($(date +%s) - T0))s; logs in $OUT/logs)"
[ "$nf" = 0 ]
