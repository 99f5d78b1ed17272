# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Guest A of the "twohost" group (see groups/twohost.sh): formats the shared
# medium, runs the resource manager and maru-server for both hosts, stores
# chunks, tells the host "HWREADY" (which then boots guest B), waits for B's
# "done" on TCP port 7000 and finally retrieves what B stored.  If its
# daemons do not come up it never says HWREADY, and B is not booted.
. ./lib.sh
URL=tcp://10.0.3.1:5555
RMADDR=10.0.3.1:9850
T="hw.two.a_stores hw.two.mds_crash_cycles hw.two.a_retrieves_b"
ready() { echo HWREADY; }
if [ "$HAVE_RM" != 1 ] || [ "$HAVE_MDS" != 1 ]; then
	for t in $T; do skip "$t" "$WHY_RM$WHY_MDS"; done
	ready
	exit 0
fi
if ! devdax_labelless namespace0.0; then
	for t in $T; do fail "$t" "ndctl create-namespace failed"; done
	exit 1
fi
kv dax0.0.data_offset "$(dax_data_offset dax0.0)"
mkdir -p /tmp/rm
# one resource manager and one metadata server for every host on the link
rm_start --host 0.0.0.0 --port 9850 --state-dir /tmp/rm --log-level debug --grace-period 600 ||
	{ dump_logs; for t in $T; do fail "$t" "resource manager did not start"; done; exit 1; }
mds_start() {
	"$MDS" --host 0.0.0.0 --insecure --port 5555 --rm-address $RMADDR --log-level DEBUG \
		--client-lease-ttl 3 --state-dir /tmp/mds-state >>/tmp/mds.log 2>&1 &
	MDS_PID=$!
}
mds_start
$P mds-usage $URL || { dump_logs; for t in $T; do fail "$t" "maru-server does not answer"; done; exit 1; }
$P header /dev/dax0.0

ok=1 why=""
if [ "$HAVE_EX" = 1 ]; then
	run_for 60 "$EX" store --server $URL --key hw-two-a1 --size 1048576 --pattern 21 ||
		{ ok=0; why="$why maru-example store failed ($?);"; }
fi
if [ "$HAVE_HOLD" = 1 ]; then
	run_for 60 /test/maru-hwhold --server $URL store hw-two-a2 300000 22 ||
		{ ok=0; why="$why maru-hwhold store failed ($?);"; }
	lk=$($P mds-lookup $URL hw-two-a2)
	echo "$lk"
	[ "$(field found "$lk")" = 1 ] &&
		kv a2.devoff $(($(field offset "$lk") + $(field kv_offset "$lk")))
fi
if [ "$HAVE_EX$HAVE_HOLD" = 00 ]; then
	skip hw.two.a_stores "$WHY_EX; $WHY_HOLD"
elif [ $ok = 1 ]; then
	pass hw.two.a_stores "chunks stored from host A on its /dev/dax0.0"
else
	fail hw.two.a_stores "$why"
fi

# Crash cycles on the real device: a loop of stores runs while
# maru-server is killed with SIGKILL at a random moment, then restarted on
# the same state directory.  Every store acknowledged (maru-example exited
# 0) must resolve again at the same place with its bytes, every delete
# acknowledged after a restart must stay deleted.  B reads the acknowledged
# keys after the last restart (their list is served on port 7001).
loc() { lk=$($P mds-lookup $URL "$1") || { echo "none"; return; }
	echo "$(field region "$lk") $(field offset "$lk") $(field kv_offset "$lk") $(field kv_length "$lk")"; }
cc_cycles=0 cc_why=""
: >/tmp/acked
: >/tmp/deleted
: >/tmp/locs
if [ "$HAVE_EX" = 1 ]; then
	for c in 1 2 3 4 5; do
		(
			n=0
			while [ $n -lt 6 ]; do # bounded: each key is checked in TCG
				n=$((n + 1))
				if run_for 20 "$EX" store --server $URL --key "hw-cc-$c-$n" \
					--size 65536 --pool-size 2M --chunk-size 64K --pattern $((30 + c)) >/dev/null 2>&1; then
					echo "hw-cc-$c-$n $((30 + c))" >>/tmp/acked
				fi
			done
		) &
		LP=$!
		r=${RANDOM:-$c}
		sleep "$((r % 2)).$((r % 10))"
		kill -9 $MDS_PID
		wait $MDS_PID 2>/dev/null
		kill $LP
		wait $LP 2>/dev/null
		sleep 0.2 # a store in flight at the kill is over
		mds_start
		$P mds-usage $URL >/dev/null || { cc_why="$cc_why cycle $c: no answer after the restart;"; break; }
		grep -h "recovered from" /tmp/mds.log | tail -1
		# every acknowledged store: found where it was; the bytes of the
		# new ones (a key's bytes stay where they are: B reads them all
		# after the last restart)
		while read -r k pat <&3; do
			l=$(loc "$k")
			was=$(sed -n "s/^$k //p" /tmp/locs)
			if [ "$l" = none ]; then
				cc_why="$cc_why cycle $c: $k lost;"
			elif [ -n "$was" ] && [ "$was" != "$l" ]; then
				cc_why="$cc_why cycle $c: $k moved ($was -> $l);"
			elif [ -z "$was" ] && ! run_for 30 "$EX" retrieve --server $URL --key "$k" \
				--size 65536 --pool-size 2M --pattern "$pat" >/dev/null 2>&1; then
				cc_why="$cc_why cycle $c: $k bytes differ;"
			elif [ -z "$was" ]; then
				echo "$k $l" >>/tmp/locs
			fi
		done 3</tmp/acked
		while read -r k <&3; do
			[ "$(loc "$k")" = none ] || cc_why="$cc_why cycle $c: deleted $k is back;"
		done 3</tmp/deleted
		# one acknowledged delete per cycle
		k=$(head -1 /tmp/acked | cut -d' ' -f1)
		if [ -n "$k" ] && $P mds-delete $URL "$k" >/dev/null; then
			echo "$k" >>/tmp/deleted
			grep -v "^$k " /tmp/acked >/tmp/acked.n
			mv /tmp/acked.n /tmp/acked
		fi
		cc_cycles=$c
	done
	# the deletes of the last cycle, after one more restart
	kill -9 $MDS_PID
	wait $MDS_PID 2>/dev/null
	mds_start
	$P mds-usage $URL >/dev/null || cc_why="$cc_why no answer after the last restart;"
	while read -r k <&3; do
		[ "$(loc "$k")" = none ] || cc_why="$cc_why deleted $k is back after the last restart;"
	done 3</tmp/deleted
	na=$(wc -l </tmp/acked)
	if [ "$cc_cycles" = 5 ] && [ -z "$cc_why" ] && [ "$na" -gt 0 ]; then
		pass hw.two.mds_crash_cycles "5 SIGKILL cycles: $na acknowledged stores found in place with their bytes, $(wc -l </tmp/deleted) deletes stayed deleted"
	else
		fail hw.two.mds_crash_cycles "after $cc_cycles cycle(s), $na acknowledged:$cc_why"
	fi
	nc -l -p 7001 </tmp/acked >/dev/null 2>&1 &
else
	skip hw.two.mds_crash_cycles "$WHY_EX"
fi

ready
# B signals the end of its part (or the guest's time limit ends this)
timeout 150 nc -l -p 7000 >/tmp/b-done
echo "from B: $(cat /tmp/b-done)"
if [ "$HAVE_EX" != 1 ]; then
	skip hw.two.a_retrieves_b "$WHY_EX"
elif run_for 60 "$EX" retrieve --server $URL --key hw-two-b1 --size 65536 --pattern 23; then
	pass hw.two.a_retrieves_b "host B's chunk verified on host A"
else
	fail hw.two.a_retrieves_b "maru-example retrieve of hw-two-b1 on A failed ($?)"
fi
$P mds-usage $URL
kill -TERM $MDS_PID
wait $MDS_PID
rm_stop TERM
dump_logs
exit 0
