# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Guest B of the "twohost" group (see groups/twohost.sh).  B has a private
# NVDIMM first and the shared one second, so the shared pool is /dev/dax1.0
# here while the resource manager (on A) calls it /dev/dax0.0, and B's own
# /dev/dax0.0 is a different device: only the MARUDEV UUID mapping leads a
# client to the right bytes.
. ./lib.sh
URL=tcp://10.0.3.1:5555
RMADDR=10.0.3.1:9850
T="hw.two.b_shared_is_dax1 hw.two.uuid_maps_to_local_path hw.two.b_probe_reads_a hw.two.b_reads_after_restart
   hw.two.b_example_retrieves_a hw.two.b_libmaru_retrieves_a hw.two.b_stores
   hw.two.b_index_reads_a hw.two.b_index_sees_delete
   hw.two.killed_client_owner_gone hw.two.killed_client_data_kept
   hw.two.killed_client_region_freed hw.two.killed_client_empty_region_freed"
done_to_a() {	# tell A that B is finished (A waits on port 7000)
	for i in $(seq 1 50); do
		echo "${1:-done}" | nc 10.0.3.1 7000 && return 0
		sleep 0.2
	done
}
finish() { dump_logs; done_to_a; exit "${1:-0}"; }
if [ "$HAVE_RM" != 1 ] || [ "$HAVE_MDS" != 1 ]; then
	for t in $T; do skip "$t" "$WHY_RM$WHY_MDS"; done
	finish
fi
# the link to A first: without it nothing below can work
ip addr show eth0 | grep 'inet '
if ! ping -c 2 -w 10 10.0.3.1 >/tmp/ping.log 2>&1; then
	cat /tmp/ping.log
	for t in $T; do fail "$t" "no network link to host A (10.0.3.1)"; done
	exit 1
fi
# private device: region0 -> dax0.0 (no Maru header); the shared one was
# formatted by A, so region1 comes up as a devdax namespace by itself
devdax_labelless namespace0.0 || note "private namespace not created"
$P enum
if [ -e /dev/dax1.0 ] && [ "$(cat /sys/bus/dax/devices/dax1.0/size)" -gt 400000000 ]; then
	pass hw.two.b_shared_is_dax1 "shared medium is /dev/dax1.0 on B, private dax0.0 is $(cat /sys/bus/dax/devices/dax0.0/size 2>/dev/null) bytes"
else
	fail hw.two.b_shared_is_dax1 "no shared /dev/dax1.0 on B"
fi
kv dax1.0.data_offset "$(dax_data_offset dax1.0)"

# where does A's chunk live?  LOOKUP at the server, GET_ACCESS at the RM
if [ "$HAVE_HOLD" = 1 ]; then
	lk=""
	for i in $(seq 1 100); do
		lk=$($P --timeout 2000 mds-lookup $URL hw-two-a2) && break
		[ "$(field found "$lk")" = 0 ] && break	# the server answered: A never stored it
		sleep 0.2
	done
	echo "$lk"
	acc=$($P rm-access $RMADDR "$(field region "$lk")" "$(field offset "$lk")" \
		"$(field length "$lk")" "$(field token "$lk")")
	echo "$acc"
	U=$(field uuid "$acc")
	M=$($P uuidmap "$U")
	echo "$M"
	if [ "$(field found "$lk")" != 1 ]; then
		fail hw.two.uuid_maps_to_local_path "A's chunk hw-two-a2 not found: $lk"
		fail hw.two.b_probe_reads_a "A's chunk hw-two-a2 not found"
	elif [ "$(field path "$acc")" = /dev/dax0.0 ] && [ "$(field path "$M")" = /dev/dax1.0 ]; then
		pass hw.two.uuid_maps_to_local_path "server path /dev/dax0.0, uuid $U is local /dev/dax1.0"
		DEVOFF=$(($(field offset "$acc") + $(field kv_offset "$lk")))
		if $P check /dev/dax1.0 "$DEVOFF" 300000 22; then
			pass hw.two.b_probe_reads_a "A's exact bytes at /dev/dax1.0+$DEVOFF, mapped on B"
		else
			fail hw.two.b_probe_reads_a "A's pattern not at /dev/dax1.0+$DEVOFF"
		fi
	else
		fail hw.two.uuid_maps_to_local_path "access: $acc; uuidmap: $M"
		fail hw.two.b_probe_reads_a "no local device for the chunk's uuid"
	fi
else
	skip hw.two.uuid_maps_to_local_path "$WHY_HOLD"
	skip hw.two.b_probe_reads_a "$WHY_HOLD"
fi

if [ "$HAVE_EX" = 1 ]; then
	if run_for 60 "$EX" retrieve --server $URL --key hw-two-a1 --size 1048576 --pattern 21; then
		pass hw.two.b_example_retrieves_a "maru-example on B verified A's 1 MiB chunk"
	else
		fail hw.two.b_example_retrieves_a "maru-example retrieve on B failed ($?)"
	fi
	# what A acknowledged across its maru-server crash cycles, read here
	# after the last restart, through this host's own mapping
	: >/tmp/acked
	for i in $(seq 1 20); do
		nc 10.0.3.1 7001 </dev/null >/tmp/acked 2>/dev/null && [ -s /tmp/acked ] && break
		sleep 0.3
	done
	n=0 bad=""
	while read -r k pat <&3; do
		n=$((n + 1))
		run_for 30 "$EX" retrieve --server $URL --key "$k" --size 65536 --pool-size 2M \
			--pattern "$pat" >/dev/null 2>&1 || bad="$bad $k"
	done 3</tmp/acked
	if [ "$n" -gt 0 ] && [ -z "$bad" ]; then
		pass hw.two.b_reads_after_restart "B verified all $n chunks A stored across 5 maru-server crashes"
	else
		fail hw.two.b_reads_after_restart "of $n acknowledged chunks, not verified on B:${bad:- (none listed)}"
	fi
	if run_for 60 "$EX" store --server $URL --key hw-two-b1 --size 65536 --pattern 23; then
		pass hw.two.b_stores "B stored hw-two-b1 through its /dev/dax1.0"
	else
		fail hw.two.b_stores "maru-example store on B failed ($?)"
	fi
else
	skip hw.two.b_example_retrieves_a "$WHY_EX"
	skip hw.two.b_reads_after_restart "$WHY_EX"
	skip hw.two.b_stores "$WHY_EX"
fi

if [ "$HAVE_HOLD" != 1 ]; then
	for t in hw.two.b_libmaru_retrieves_a hw.two.b_index_reads_a \
		hw.two.b_index_sees_delete hw.two.killed_client_owner_gone \
		hw.two.killed_client_data_kept hw.two.killed_client_region_freed \
		hw.two.killed_client_empty_region_freed; do
		skip "$t" "$WHY_HOLD"
	done
	finish
fi
if run_for 60 /test/maru-hwhold --server $URL retrieve hw-two-a2 300000 22; then
	pass hw.two.b_libmaru_retrieves_a "libmaru on B verified A's chunk byte for byte"
else
	fail hw.two.b_libmaru_retrieves_a "maru-hwhold retrieve on B failed ($?)"
fi

# The shared index: A's maru-server publishes its index in a region of the shared
# pool (coherence flush); B maps it read-only through the UUID mapping and
# answers retrieves of A's chunk with no request
out=$(run_for 60 /test/maru-hwhold --server $URL index-check hw-two-a2 300000 22)
echo "$out"
if echo "$out" | grep -q 'index attached=1 noncoherent=1 .*result=ok'; then
	pass hw.two.b_index_reads_a "$(echo "$out" | grep '^index')"
else
	fail hw.two.b_index_reads_a "A's chunk not read through the index: $(echo "$out" | tail -1)"
fi
# a key B stores, read from the index, deleted through A's server: the
# index itself says it is gone (A wrote the line back, B invalidated it)
if run_for 60 /test/maru-hwhold --server $URL store hw-two-idx 4096 31 >/dev/null &&
	run_for 60 /test/maru-hwhold --server $URL index-check hw-two-idx 4096 31 >/dev/null &&
	$P mds-delete $URL hw-two-idx >/dev/null; then
	out=$(run_for 60 /test/maru-hwhold --server $URL index-gone hw-two-idx)
	if echo "$out" | grep -q 'result=ok'; then
		pass hw.two.b_index_sees_delete "$out"
	else
		fail hw.two.b_index_sees_delete "$out"
	fi
else
	fail hw.two.b_index_sees_delete "could not store, read and delete hw-two-idx"
fi

# a worker on B stores a chunk, holds its region, and is killed (SIGKILL)
# (a region of its own: MARU_PAGE_GRANTS=0, or a full pool would grant it
# pages of others' regions)
free_of() { field free "$($P rm-stats $RMADDR | grep '^pool path=/dev/dax0.0 ')"; }
F0=$(free_of)
MARU_PAGE_GRANTS=0 /test/maru-hwhold --server $URL --instance hw-victim --pool-size 4194304 \
	store hw-two-victim 4096 24 --hold >/tmp/victim.log 2>&1 &
VPID=$!
for i in $(seq 1 150); do
	grep -q '^holding' /tmp/victim.log && break
	sleep 0.2
done
cat /tmp/victim.log
VR=$(field region "$(grep '^stored' /tmp/victim.log)")
F1=$(free_of)
$P mds-list $URL
if [ -z "$VR" ] || ! $P mds-list $URL | grep -q "^listed region=$VR "; then
	for t in hw.two.killed_client_owner_gone hw.two.killed_client_data_kept \
		hw.two.killed_client_region_freed; do
		fail "$t" "victim did not store and hold its region (region '$VR')"
	done
	kill -9 $VPID
	finish
fi
kill -9 $VPID
wait $VPID 2>/dev/null
t0=$(cut -d' ' -f1 /proc/uptime)
gone=0
for i in $(seq 1 300); do
	if ! $P mds-list $URL | grep -q "^listed region=$VR "; then gone=1; break; fi
	sleep 0.1
done
t1=$(cut -d' ' -f1 /proc/uptime)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
if [ $gone = 1 ]; then
	pass hw.two.killed_client_owner_gone "region $VR no longer listed as owned ${secs}s after SIGKILL (lease ttl 3 s)"
else
	fail hw.two.killed_client_owner_gone "region $VR still listed as owned ${secs}s after SIGKILL"
fi
lk=$($P mds-lookup $URL hw-two-victim)
echo "$lk"
if [ "$(field found "$lk")" = 1 ] &&
	$P check /dev/dax1.0 $(($(field offset "$lk") + $(field kv_offset "$lk"))) 4096 24; then
	pass hw.two.killed_client_data_kept "the dead worker's chunk still resolves and its bytes are intact"
else
	fail hw.two.killed_client_data_kept "after the kill: $lk"
fi
del=$($P mds-delete $URL hw-two-victim)
echo "$del"
F2=""
for i in $(seq 1 50); do
	F2=$(free_of)
	[ "$F2" = "$F0" ] && break
	sleep 0.1
done
if [ "$(field success "$del")" = 1 ] && [ "$F2" = "$F0" ] && [ "$F1" -lt "$F0" ]; then
	pass hw.two.killed_client_region_freed "delete of the last key freed region $VR at the RM (free $F1 -> $F2)"
else
	fail hw.two.killed_client_region_freed "$del; RM free before victim $F0, while holding $F1, after delete $F2"
fi

# a worker that owns only an empty region is killed: once its lease
# expires the region goes back to the resource manager at once
F0=$(free_of)
MARU_PAGE_GRANTS=0 /test/maru-hwhold --server $URL --instance hw-idle --pool-size 4194304 idle >/tmp/idle.log 2>&1 &
VPID=$!
for i in $(seq 1 150); do
	grep -q '^holding' /tmp/idle.log && break
	sleep 0.2
done
cat /tmp/idle.log
F1=$(free_of)
kill -9 $VPID
wait $VPID 2>/dev/null
t0=$(cut -d' ' -f1 /proc/uptime)
F2=$F1
for i in $(seq 1 300); do
	F2=$(free_of)
	[ "$F2" = "$F0" ] && break
	sleep 0.1
done
secs=$(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.1f", b-a}')
if grep -q '^holding' /tmp/idle.log && [ "$F1" -lt "$F0" ] && [ "$F2" = "$F0" ]; then
	pass hw.two.killed_client_empty_region_freed "region $(field region "$(grep '^idle' /tmp/idle.log)") back at the RM ${secs}s after SIGKILL (free $F1 -> $F2)"
else
	fail hw.two.killed_client_empty_region_freed "RM free before $F0, while holding $F1, ${secs}s after SIGKILL $F2"
fi
$P mds-usage $URL
finish
