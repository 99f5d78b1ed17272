# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Guest script of the "datapath" group (see groups/datapath.sh).
. ./lib.sh
URL=tcp://127.0.0.1:5555
T_EX="hw.data.example_store_retrieve hw.data.example_bytes_on_device"
T_HOLD="hw.data.libmaru_pattern_on_device"
need() {	# need VAR... : skip the tests of $T when a binary is missing
	for v in "$@"; do
		eval "h=\$HAVE_$v w=\$WHY_$v"
		[ "$h" = 1 ] && continue
		for t in $T; do skip "$t" "$w"; done
		return 1
	done
}
T="$T_EX $T_HOLD"
need RM MDS || exit 0

if ! devdax_labelless namespace0.0; then
	for t in $T; do fail "$t" "ndctl create-namespace failed"; done
	exit 1
fi
kv dax0.0.data_offset "$(dax_data_offset dax0.0)"
mkdir -p /tmp/rm
rm_start --host 127.0.0.1 --port 9850 --state-dir /tmp/rm --log-level debug ||
	{ dump_logs; for t in $T; do fail "$t" "resource manager did not start"; done; exit 1; }
"$MDS" --host 127.0.0.1 --port 5555 --rm-address $RMADDR --log-level DEBUG \
	--state-dir /tmp/mds-state >/tmp/mds.log 2>&1 &
MDS_PID=$!
if ! $P mds-usage $URL; then
	dump_logs
	for t in $T; do fail "$t" "maru-server does not answer"; done
	exit 1
fi
UUID=$(field uuid "$($P header /dev/dax0.0)")

# locate KEY: lookup at the metadata server, GET_ACCESS at the resource
# manager; sets DEVOFF (byte offset of the chunk in /dev/dax0.0), LEN, WHY
locate() {
	lk=$($P mds-lookup $URL "$1")
	echo "$lk"
	[ "$(field found "$lk")" = 1 ] || { WHY="lookup($1): $lk"; return 1; }
	acc=$($P rm-access $RMADDR "$(field region "$lk")" "$(field offset "$lk")" \
		"$(field length "$lk")" "$(field token "$lk")")
	echo "$acc"
	[ "$(field path "$acc")" = /dev/dax0.0 ] && [ "$(field uuid "$acc")" = "$UUID" ] ||
		{ WHY="GET_ACCESS($1): $acc (want /dev/dax0.0 uuid $UUID)"; return 1; }
	DEVOFF=$(($(field offset "$acc") + $(field kv_offset "$lk")))
	LEN=$(field kv_length "$lk")
}

# 1. the example program: store, then retrieve and verify in new processes
T=$T_EX
if need EX; then
	ok=1 why=""
	for spec in hw-data-1:1048576:7 hw-data-2:5000:8; do
		IFS=: read -r k n s <<EOF
$spec
EOF
		run_for 60 "$EX" store --server $URL --key "$k" --size "$n" --pattern "$s" ||
			{ ok=0; why="$why store $k failed ($?);"; continue; }
		run_for 60 "$EX" retrieve --server $URL --key "$k" --size "$n" --pattern "$s" ||
			{ ok=0; why="$why retrieve $k not verified ($?);"; }
	done
	if [ $ok = 1 ]; then
		pass hw.data.example_store_retrieve "1 MiB and 5000-byte chunks stored and verified by maru-example"
	else
		fail hw.data.example_store_retrieve "$why"
	fi
	if locate hw-data-1; then
		S=$($P sum /dev/dax0.0 "$DEVOFF" "$LEN")
		echo "$S"
		kv ex.devoff "$DEVOFF"
		kv ex.len "$LEN"
		kv ex.fnv "$(field fnv "$S")"
		if [ "$LEN" = 1048576 ] && ! echo "$S" | grep -q zero=1; then
			pass hw.data.example_bytes_on_device "hw-data-1 at /dev/dax0.0+$DEVOFF ($LEN bytes, fnv $(field fnv "$S"))"
		else
			fail hw.data.example_bytes_on_device "length $LEN, $S"
		fi
	else
		fail hw.data.example_bytes_on_device "$WHY"
	fi
fi

# 2. libmaru through maru-hwhold with the probe's pattern: exact bytes
T=$T_HOLD
if need HOLD; then
	out=$(run_for 60 /test/maru-hwhold --server $URL store hw-data-3 777777 9 2>&1)
	echo "$out"
	if ! echo "$out" | grep -q '^stored '; then
		fail hw.data.libmaru_pattern_on_device "store through libmaru failed: $(echo "$out" | tail -3 | tr '\n' '|')"
	elif ! locate hw-data-3; then
		fail hw.data.libmaru_pattern_on_device "$WHY"
	elif [ "$LEN" = 777777 ] && $P check /dev/dax0.0 "$DEVOFF" "$LEN" 9; then
		kv hold.devoff "$DEVOFF"
		kv hold.len "$LEN"
		pass hw.data.libmaru_pattern_on_device "exact pattern at /dev/dax0.0+$DEVOFF"
	else
		fail hw.data.libmaru_pattern_on_device "kv_length $LEN; pattern not at /dev/dax0.0+$DEVOFF"
	fi
fi

kill -TERM $MDS_PID
wait $MDS_PID
rm_stop TERM
dump_logs
exit 0
