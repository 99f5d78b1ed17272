# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Guest script of the "cxl" group (see groups/cxl.sh).
. ./lib.sh
T="hw.cxl.found_by_libdaxctl hw.cxl.alloc_and_map"
if [ "$HAVE_RM" != 1 ]; then
	for t in $T; do skip "$t" "$WHY_RM"; done
	exit 0
fi
# CXL type-3 pmem -> cxl region -> devdax namespace (every boot, see the
# reference's pitfall 8)
if ! hw-cxl-devdax; then
	for t in $T; do fail "$t" "cxl create-region / create-namespace failed"; done
	exit 1
fi
cxl list -M 2>/dev/null | head -5
$P enum
SIZE=$(cat /sys/bus/dax/devices/dax0.0/size) ALIGN=$(cat /sys/bus/dax/devices/dax0.0/align)
kv dax0.0.data_offset "$(dax_data_offset dax0.0)"
mkdir -p /tmp/rm
rm_start --host 127.0.0.1 --port 9850 --state-dir /tmp/rm --log-level debug --grace-period 600 ||
	{ dump_logs; for t in $T; do fail "$t" "resource manager did not start"; done; exit 1; }
L=$(pool_line /dev/dax0.0)
if [ -n "$L" ] && [ "$(field total "$L")" = $((SIZE - ALIGN)) ] && [ "$(field align "$L")" = "$ALIGN" ]; then
	pass hw.cxl.found_by_libdaxctl "$L"
else
	fail hw.cxl.found_by_libdaxctl "device size $SIZE align $ALIGN; STATS: $($P rm-stats $RMADDR | tr '\n' ' ')"
fi
a=$($P --id hwtest-remote:1 rm-alloc $RMADDR 65536)
echo "$a"
o=$(field offset "$a")
H=$($P header /dev/dax0.0)
echo "$H"
# CXL memory is emulated through MMIO here (~50 MB/s): keep it small
if [ "$(field status "$a")" = 0 ] && [ $((o % ALIGN)) = 0 ] && [ "$(field version "$H")" = 1 ] &&
	$P fill /dev/dax0.0 "$o" 65536 41 && $P check /dev/dax0.0 "$o" 65536 41; then
	kv cxl.devoff "$o"
	kv cxl.uuid "$(field uuid "$H")"
	pass hw.cxl.alloc_and_map "region at /dev/dax0.0+$o written through the mapping, header $(field uuid "$H")"
else
	fail hw.cxl.alloc_and_map "alloc: $a; header: $H"
fi
rm_stop TERM
dump_logs
exit 0
