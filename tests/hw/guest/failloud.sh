# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Guest script of the "failloud" group (see groups/failloud.sh).  FAIL_CASE
# (from env.sh) picks the device set-up:
#   align  a 2 MiB-aligned dax0.0 whose alignment is then misreported
#          (bind mounts over the sysfs align files that libdaxctl reads),
#          then opened by a non-root daemon, then a healthy control start
#   small  a 1 GiB-aligned dax0.0 of exactly 1 GiB: the header unit and no
#          room for a single region
. ./lib.sh
if [ "$FAIL_CASE" = align ]; then
	T="hw.fail.align_not_power_of_two hw.fail.align_too_big hw.fail.cannot_open hw.fail.control_starts"
else
	T="hw.fail.too_small"
fi
if [ "$HAVE_RM" != 1 ]; then
	for t in $T; do skip "$t" "$WHY_RM"; done
	exit 0
fi
if [ "$FAIL_CASE" = align ]; then
	devdax_labelless namespace0.0
else
	devdax_labelless namespace0.0 -a 1G
fi || { for t in $T; do fail "$t" "ndctl create-namespace failed"; done; exit 1; }
$P enum

N=0
# refused MODE RE [RUNAS...]: start the daemon on the device (MODE
# explicit: --pool /dev/dax0.0; discover: no --pool) and judge the outcome.
# Right: it exits non-zero, or (discover only) keeps running without the
# device; either way a log line names dax0.0 and matches RE (says why).
# Sets MSG (the evidence) or WHY.
refused() {
	mode=$1 re=$2
	shift 2
	N=$((N + 1))
	log=/tmp/refused-$N.log st=/tmp/state-$N
	mkdir -p $st && chmod 777 $st
	args=""
	[ "$mode" = explicit ] && args="--pool /dev/dax0.0"
	"$@" "$RM" --host 127.0.0.1 --port 9850 --state-dir $st --log-level debug $args >$log 2>&1 &
	pid=$!
	serving=0
	rm -f /tmp/stats.txt
	# until it exits or serves (up to 30 s: TCG on a loaded host is slow)
	for i in $(seq 1 300); do
		kill -0 $pid 2>/dev/null || break
		if $P rm-stats $RMADDR >/tmp/stats.txt 2>/dev/null; then serving=1; break; fi
		sleep 0.1
	done
	echo "--- $mode $*:"
	cat $log
	why=$(grep 'dax0\.0' $log | grep -iE "$re" | head -1)
	if kill -0 $pid 2>/dev/null; then
		kill -TERM $pid
		wait $pid
		pools=$(grep '^pool ' /tmp/stats.txt 2>/dev/null | tr '\n' ' ')
		if [ $serving = 1 ] && echo "$pools" | grep -q 'path=/dev/dax0.0 '; then
			WHY="$mode: SERVES /dev/dax0.0: $pools"
			return 1
		fi
		if [ "$mode" = explicit ]; then
			WHY="$mode: kept running (pools: $pools) instead of a start-up error"
			return 1
		fi
		[ -n "$why" ] || { WHY="$mode: running without the device, but no log line names dax0.0 and says why (/$re/)"; return 1; }
		MSG="$mode: runs without it (pools: ${pools:-none}), logs '$why'"
		return 0
	fi
	wait $pid
	rc=$?
	[ $rc != 0 ] || { WHY="$mode: exit 0"; return 1; }
	[ -n "$why" ] || { WHY="$mode: exit $rc, but no log line names dax0.0 and says why (/$re/): $(grep -v 'maru-resource-manager:   ' $log | tail -3 | tr '\n' '|')"; return 1; }
	MSG="$mode: exit $rc, '$why'"
	return 0
}

# judge NAME REASON-REGEX [RUNAS...]: both modes refused with the reason,
# and the device left untouched (no MARUDEV header written)
judge() {
	name=$1 re=$2
	shift 2
	ok=1 why_all="" msgs=""
	for mode in explicit discover; do
		if refused $mode "$re" "$@"; then
			msgs="$msgs $MSG;"
		else
			ok=0 why_all="$why_all $WHY;"
		fi
	done
	unfake_align
	h=$($P header /dev/dax0.0)
	[ "$(field magic "$h")" = none ] || { ok=0; why_all="$why_all the refused device was written: $h;"; }
	if [ $ok = 1 ]; then pass "$name" "$msgs"; else fail "$name" "$why_all"; fi
}

# misreported alignment: what libdaxctl reads for dax0.0 and its region
D=$(readlink -f /sys/bus/dax/devices/dax0.0)
fake_align() {
	for f in "$D/align" "$D/../dax_region/align"; do
		[ -e "$f" ] || continue
		echo "$1" >/tmp/fake-align
		mount --bind /tmp/fake-align "$f"
	done
	$P enum | grep dax0.0
}
unfake_align() {
	for f in "$D/align" "$D/../dax_region/align"; do
		umount "$f" 2>/dev/null
	done
}

if [ "$FAIL_CASE" = small ]; then
	judge hw.fail.too_small 'small|size|space|cannot hold'
	dump_logs
	exit 0
fi

# misreported alignments, injected through sysfs
fake_align 3145728
judge hw.fail.align_not_power_of_two 'align'
fake_align 2147483648
judge hw.fail.align_too_big 'align'

# /dev/dax0.0 is crw------- root: a daemon running as nobody cannot open it
judge hw.fail.cannot_open 'permission|denied|access|open|EACCES' $P runas 65534 65534

# control: the same device as root with nothing faked is served
if rm_start --host 127.0.0.1 --port 9850 --state-dir /tmp/control --pool /dev/dax0.0 --log-level debug &&
	L=$(pool_line /dev/dax0.0); then
	pass hw.fail.control_starts "$L"
	rm_stop TERM
else
	fail hw.fail.control_starts "the unmodified device is not served: $(tail -3 /tmp/rm.log | tr '\n' '|')"
fi
dump_logs
exit 0
