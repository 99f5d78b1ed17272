# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Guest script of the "discovery" group (see groups/discovery.sh): one
# labelled NVDIMM, two devdax namespaces (the second created after the
# resource manager started, then SIGHUP).
. ./lib.sh
A=$(printf 'hw.discovery.%s ' found_by_libdaxctl second_rm_refused stats_size_align pool_monitor_csv \
	header_written alloc_alignment mmap_at_offsets sighup_adds_pool clean_stop)
if [ "$HAVE_RM" != 1 ]; then
	for t in $A; do skip "$t" "$WHY_RM"; done
	exit 0
fi

# a labelled DIMM (label-size=128K): blank labels look label-less, so
# initialise them, then carve the first namespace (dax0.0)
ndctl disable-region all >/dev/null 2>&1
ndctl init-labels -f all >/dev/null 2>&1
ndctl enable-region all >/dev/null 2>&1
if ! ndctl create-namespace -r region0 -m devdax --map=mem -s 64M >/tmp/ndctl.log 2>&1; then
	cat /tmp/ndctl.log
	for t in $A; do fail "$t" "ndctl create-namespace failed"; done
	exit 1
fi
$P enum
SIZE=$(cat /sys/bus/dax/devices/dax0.0/size)
ALIGN=$(cat /sys/bus/dax/devices/dax0.0/align)
kv dax0.0.size "$SIZE"
kv dax0.0.align "$ALIGN"
kv dax0.0.data_offset "$(dax_data_offset dax0.0)"
ENUM=$($P enum | grep '^dev path=/dev/dax0.0 ')

# discovery mode: no --pool at all
mkdir -p /tmp/rm
if ! rm_start --host 127.0.0.1 --port 9850 --state-dir /tmp/rm --log-level debug --grace-period 600; then
	dump_logs
	for t in $A; do fail "$t" "resource manager did not start (no --pool)"; done
	exit 1
fi
$P rm-stats $RMADDR
NPOOLS=$($P rm-stats $RMADDR | sed -n 's/^pools count=//p')
L=$(pool_line /dev/dax0.0)
if [ -n "$L" ] && [ "$(field type "$L")" = 0 ] && [ "$NPOOLS" = 1 ]; then
	pass hw.discovery.found_by_libdaxctl "$L"
else
	fail hw.discovery.found_by_libdaxctl "want exactly one DEV_DAX pool /dev/dax0.0, got $NPOOLS: $L"
fi

# a second resource manager (its own state dir, discovery mode) finds the
# device held: it refuses to start, and does not fall back to an emulated
# pool that other hosts could not share
mkdir -p /tmp/rm2
"$RM" --port 9851 --state-dir /tmp/rm2 >/tmp/rm2.log 2>&1 &
R2=$!
i=0
while kill -0 $R2 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $R2 2>/dev/null; then
	kill $R2
	wait $R2
	fail hw.discovery.second_rm_refused "a second resource manager runs on the held device: $(tr '\n' '|' </tmp/rm2.log)"
elif grep -q "/dev/dax0.0 is in use by another maru-resource-manager (pid $RM_PID)" /tmp/rm2.log &&
	! grep -q EMULATED /tmp/rm2.log && [ ! -e /dev/shm/maru-pool ]; then
	pass hw.discovery.second_rm_refused "$(grep 'in use' /tmp/rm2.log | sed 's/.*maru-resource-manager: //')"
else
	fail hw.discovery.second_rm_refused "$(tr '\n' '|' </tmp/rm2.log)"
fi

T=$(field total "$L") F=$(field free "$L") AL=$(field align "$L")
if [ -n "$L" ] && [ "$AL" = "$ALIGN" ] && [ "$AL" = "$(field align "$ENUM")" ] &&
	[ "$T" = $((SIZE - ALIGN)) ] && [ "$F" = "$T" ]; then
	pass hw.discovery.stats_size_align "total=$T=size-align free=$F align=$AL (sysfs+libdaxctl)"
else
	fail hw.discovery.stats_size_align "device size=$SIZE align=$ALIGN ($ENUM), STATS: total=$T free=$F align=$AL"
fi

if [ "$HAVE_PM" = 1 ]; then
	CSV=$($PM --csv --address $RMADDR 2>&1)
	echo "$CSV"
	ROW=$(echo "$CSV" | grep ',/dev/dax0.0,')
	if echo "$CSV" | head -1 | grep -qx 'timestamp,dax_path,dax_type,total_bytes,free_bytes,used_bytes,usage_pct' &&
		[ "$(echo "$ROW" | cut -d, -f3-7)" = "DEV_DAX,$T,$T,0,0.00" ]; then
		pass hw.discovery.pool_monitor_csv "$ROW"
	else
		fail hw.discovery.pool_monitor_csv "want DEV_DAX,$T,$T,0,0.00 for /dev/dax0.0, got: $(echo "$CSV" | tr '\n' '|')"
	fi
else
	skip hw.discovery.pool_monitor_csv "$WHY_PM"
fi

H=$($P header /dev/dax0.0)
echo "$H"
UUID=$(field uuid "$H")
kv dax0.0.uuid "$UUID"
if [ "$(field version "$H")" = 1 ] && [ "$(field uuid_v4 "$H")" = 1 ] && [ "$(field reserved "$H")" = 0 ]; then
	pass hw.discovery.header_written "uuid $UUID (v4), read through an mmap of /dev/dax0.0"
else
	fail hw.discovery.header_written "no valid MARUDEV header on /dev/dax0.0: $H"
fi

# allocations of awkward sizes: aligned, inside the data area, disjoint
ok=1 why="" sum=0 i=0 prev_end=0 HANDLES=""
for sz in 1 4096 $ALIGN $((ALIGN + 1)) $((3 * ALIGN - 1)); do
	a=$($P --id hwtest-remote:1 rm-alloc $RMADDR $sz)
	echo "$a"
	o=$(field offset "$a") l=$(field length "$a") want=$(((sz + ALIGN - 1) / ALIGN * ALIGN))
	if [ "$(field status "$a")" != 0 ]; then ok=0; why="$why alloc($sz) failed: $a;"; continue; fi
	[ $((o % ALIGN)) = 0 ] || { ok=0; why="$why offset $o not aligned;"; }
	[ "$o" -ge "$ALIGN" ] || { ok=0; why="$why offset $o inside the header unit;"; }
	[ "$l" = "$want" ] || { ok=0; why="$why length $l for size $sz (want $want);"; }
	[ $((o + l)) -le "$SIZE" ] || { ok=0; why="$why region $o+$l beyond the device;"; }
	[ "$o" -ge "$prev_end" ] || { ok=0; why="$why region at $o overlaps the previous one;"; }
	[ "$(field path "$a")" = /dev/dax0.0 ] || { ok=0; why="$why path $(field path "$a");"; }
	[ "$(field uuid "$a")" = "$UUID" ] || { ok=0; why="$why uuid $(field uuid "$a") != header $UUID;"; }
	prev_end=$((o + l)) sum=$((sum + l)) i=$((i + 1))
	HANDLES="$HANDLES $(field region "$a"):$o:$l:$(field token "$a")"
done
F2=$(field free "$(pool_line /dev/dax0.0)")
[ "$F2" = $((F - sum)) ] || { ok=0; why="$why free $F2 after allocating $sum (want $((F - sum)));"; }
if [ $ok = 1 ]; then
	pass hw.discovery.alloc_alignment "$i regions, offsets multiples of $ALIGN from $ALIGN, lengths rounded, free -$sum"
else
	fail hw.discovery.alloc_alignment "$why"
fi

# map every region where GET_ACCESS says, write a pattern, then check all:
# an overlap or a wrong offset would clobber a neighbour
ok=1 why="" seed=100
for h in $HANDLES; do
	IFS=: read -r r o l t <<EOF
$h
EOF
	acc=$($P rm-access $RMADDR "$r" "$o" "$l" "$t")
	[ "$(field path "$acc")" = /dev/dax0.0 ] && [ "$(field offset "$acc")" = "$o" ] ||
		{ ok=0; why="$why access($r): $acc;"; }
	$P fill /dev/dax0.0 "$o" "$l" $seed >/dev/null || { ok=0; why="$why fill($r) at $o failed;"; }
	kv "region.$seed" "$o:$l"
	seed=$((seed + 1))
done
seed=100
for h in $HANDLES; do
	o=$(echo "$h" | cut -d: -f2) l=$(echo "$h" | cut -d: -f3)
	$P check /dev/dax0.0 "$o" "$l" $seed || { ok=0; why="$why region at $o lost its bytes;"; }
	seed=$((seed + 1))
done
[ -n "$HANDLES" ] || { ok=0; why="no regions were allocated;"; }
if [ $ok = 1 ]; then
	pass hw.discovery.mmap_at_offsets "each region mapped from /dev/dax0.0 at its handle offset, patterns intact"
else
	fail hw.discovery.mmap_at_offsets "$why"
fi

# a second namespace appears while the daemon runs; SIGHUP adds it
if ndctl create-namespace -r region0 -m devdax --map=mem -s 48M >/tmp/ndctl.log 2>&1 &&
	[ -e /sys/bus/dax/devices/dax0.1 ]; then
	S1=$(cat /sys/bus/dax/devices/dax0.1/size) A1=$(cat /sys/bus/dax/devices/dax0.1/align)
	kv dax0.1.data_offset "$(dax_data_offset dax0.1)"
	before=$(pool_line /dev/dax0.1)
	kill -HUP "$RM_PID"
	L1=""
	# the rescan's result, polled for up to 30 s (TCG on a loaded host)
	for i in $(seq 1 300); do
		L1=$(pool_line /dev/dax0.1) && break
		sleep 0.1
	done
	L0=$(pool_line /dev/dax0.0)
	a=$($P --id hwtest-remote:1 rm-alloc $RMADDR 1 /dev/dax0.1)
	echo "$a"
	H1=$($P header /dev/dax0.1)
	echo "$H1"
	kv dax0.1.uuid "$(field uuid "$H1")"
	if [ -z "$before" ] && [ -n "$L1" ] && [ "$(field total "$L1")" = $((S1 - A1)) ] &&
		[ "$(field free "$L0")" = "$F2" ] && [ "$(field status "$a")" = 0 ] &&
		[ "$(field offset "$a")" = "$A1" ] && [ "$(field uuid "$H1")" != "$UUID" ] &&
		[ "$(field uuid "$a")" = "$(field uuid "$H1")" ] && [ "$(field version "$H1")" = 1 ]; then
		pass hw.discovery.sighup_adds_pool "$L1; dax0.0 untouched; new header $(field uuid "$H1")"
	else
		fail hw.discovery.sighup_adds_pool "before HUP: '$before'; after: '$L1' (want total $((S1 - A1))); dax0.0: $L0 (free want $F2); alloc: $a; header: $H1"
	fi
else
	cat /tmp/ndctl.log
	fail hw.discovery.sighup_adds_pool "could not create the second namespace"
fi

rm_stop TERM
st=$?
if [ $st = 0 ]; then
	pass hw.discovery.clean_stop "SIGTERM: exit 0"
else
	fail hw.discovery.clean_stop "SIGTERM: exit status $st"
fi
dump_logs
exit 0
