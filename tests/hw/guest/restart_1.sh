# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# First boot of the "restart" group (see groups/restart.sh).  The resource
# manager keeps its state directory on the host (virtio-9p /mnt/host), so a
# second boot on the same backing file finds both again.
. ./lib.sh
T="hw.restart.clean_restart_keeps_allocations hw.restart.header_survives_restart
   hw.restart.crash_restart_keeps_acknowledged hw.restart.no_overlap_after_restart"
if [ "$HAVE_RM" != 1 ]; then
	for t in $T; do skip "$t" "$WHY_RM"; done
	exit 0
fi
devdax_labelless namespace0.0 || { for t in $T; do fail "$t" "ndctl create-namespace failed"; done; exit 1; }
S=/mnt/host/state
RMARGS="--host 127.0.0.1 --port 9850 --state-dir $S --log-level debug --grace-period 3600"
ID=hwtest-remote:7
rm_start $RMARGS || { dump_logs; for t in $T; do fail "$t" "resource manager did not start"; done; exit 1; }
UUID0=$(field uuid "$($P header /dev/dax0.0)")

# alloc SIZE SEED: allocate, fill with the pattern, remember in $H
H=""
alloc() {
	a=$($P --id $ID rm-alloc $RMADDR "$1")
	echo "$a"
	[ "$(field status "$a")" = 0 ] || return 1
	r=$(field region "$a") o=$(field offset "$a") l=$(field length "$a") t=$(field token "$a")
	$P fill /dev/dax0.0 "$o" "$l" "$2" >/dev/null || return 1
	H="$H $r:$o:$l:$t:$2"
	LAST="$r:$o:$l:$t"
}
# verify HANDLES: GET_ACCESS answers the same place and the bytes are there
verify() {
	v=0
	for h in $1; do
		IFS=: read -r r o l t s <<EOF
$h
EOF
		acc=$($P rm-access $RMADDR "$r" "$o" "$l" "$t")
		if [ "$(field status "$acc")" != 0 ] || [ "$(field path "$acc")" != /dev/dax0.0 ] ||
			[ "$(field offset "$acc")" != "$o" ] || [ "$(field length "$acc")" != "$l" ] ||
			[ "$(field uuid "$acc")" != "$UUID0" ]; then
			echo "verify: region $r: $acc"
			v=1
		elif ! $P check /dev/dax0.0 "$o" "$l" "$s" >/dev/null; then
			echo "verify: region $r lost its bytes"
			v=1
		fi
	done
	return $v
}
free_now() { field free "$(pool_line /dev/dax0.0)"; }

ok=1
alloc 2097152 31 && alloc 6291456 32 && M=$LAST && alloc 1 33 || ok=0
# free the middle one: the hole must survive too
IFS=: read -r r o l t <<EOF
$M
EOF
$P --id $ID rm-free $RMADDR "$r" "$o" "$l" "$t"
H=$(echo "$H" | tr ' ' '\n' | grep -v "^$r:" | tr '\n' ' ')
F0=$(free_now)
rm_stop TERM
st=$?
rm_start $RMARGS || { dump_logs; for t in $T; do fail "$t" "resource manager did not restart"; done; exit 1; }
FACC=$($P rm-access $RMADDR "$r" "$o" "$l" "$t")
F1=$(free_now)
if [ $ok = 1 ] && [ $st = 0 ] && verify "$H" && [ "$F1" = "$F0" ] && [ "$(field status "$FACC")" = -2 ]; then
	pass hw.restart.clean_restart_keeps_allocations "SIGTERM + restart: 2 regions at the same offsets with their bytes, freed one unknown, free $F1"
else
	fail hw.restart.clean_restart_keeps_allocations "allocs ok=$ok, stop status $st, free $F0 -> $F1, freed region answers: $FACC"
fi
U=$(field uuid "$($P header /dev/dax0.0)")
if [ -n "$UUID0" ] && [ "$U" = "$UUID0" ]; then
	pass hw.restart.header_survives_restart "uuid $U kept"
else
	fail hw.restart.header_survives_restart "uuid $UUID0 -> $U"
fi

# acknowledged, then the daemon is killed at once: the WAL must have it
alloc 4194304 34 || ok=0
F2=$(free_now)
rm_stop KILL
rm_start $RMARGS || { dump_logs; for t in $T; do fail "$t" "resource manager did not restart after SIGKILL"; done; exit 1; }
F3=$(free_now)
if [ $ok = 1 ] && verify "$H" && [ "$F3" = "$F2" ]; then
	pass hw.restart.crash_restart_keeps_acknowledged "SIGKILL right after an acknowledged alloc: all 3 regions back, free $F3"
else
	fail hw.restart.crash_restart_keeps_acknowledged "free before kill $F2, after restart $F3"
fi

# new regions fill the hole but never overlap a recovered one
ok=1 why=""
for n in 1 2; do
	a=$($P --id $ID rm-alloc $RMADDR 2097152)
	echo "$a"
	no=$(field offset "$a") nl=$(field length "$a")
	[ "$(field status "$a")" = 0 ] || { ok=0; why="$why alloc failed: $a;"; continue; }
	for h in $H; do
		o=$(echo "$h" | cut -d: -f2) l=$(echo "$h" | cut -d: -f3)
		if [ "$no" -lt $((o + l)) ] && [ "$o" -lt $((no + nl)) ]; then
			ok=0; why="$why new region $no+$nl overlaps $o+$l;"
		fi
	done
	$P --id $ID rm-free $RMADDR "$(field region "$a")" "$no" "$nl" "$(field token "$a")" >/dev/null
done
if [ $ok = 1 ] && verify "$H"; then
	pass hw.restart.no_overlap_after_restart "new regions placed beside the recovered ones"
else
	fail hw.restart.no_overlap_after_restart "$why"
fi

# hand over to the second boot, then cut the power (no clean stop)
echo "$H" >/mnt/host/handles
echo "$UUID0" >/mnt/host/uuid
free_now >/mnt/host/free
sync
rm_stop KILL
dump_logs
exit 0
