# shellcheck shell=sh
# Guest A of the "twohost" group (see groups/twohost.sh): formats the shared
# medium, runs the resource manager and maru-server for both hosts, stores
# chunks, tells the host "HWREADY" (which then boots guest B), waits for B's
# "done" on TCP port 7000 and finally retrieves what B stored.  If its
# daemons do not come up it never says HWREADY, and B is not booted.
. ./lib.sh
URL=tcp://10.0.3.1:5555
RMADDR=10.0.3.1:9850
T="hw.two.a_stores hw.two.a_retrieves_b"
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
"$MDS" --host 0.0.0.0 --insecure --port 5555 --rm-address $RMADDR --log-level DEBUG \
	--client-lease-ttl 3 --state-dir /tmp/mds-state >/tmp/mds.log 2>&1 &
MDS_PID=$!
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
