# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
# Second boot of the "restart" group: same backing file, same state dir.
. ./lib.sh
T="hw.restart.reboot_finds_devdax hw.restart.reboot_keeps_allocations hw.restart.reboot_keeps_header"
if [ "$HAVE_RM" != 1 ]; then
	for t in $T; do skip "$t" "$WHY_RM"; done
	exit 0
fi
if [ ! -s /mnt/host/handles ]; then
	for t in $T; do fail "$t" "the first boot left no handles"; done
	exit 1
fi
# no ndctl here: the devdax info block on the medium brings dax0.0 back
if [ -e /dev/dax0.0 ] && ndctl list -n namespace0.0 | grep -q '"mode":"devdax"'; then
	pass hw.restart.reboot_finds_devdax "namespace0.0 is devdax again at boot"
else
	fail hw.restart.reboot_finds_devdax "no /dev/dax0.0 after reboot"
	for t in hw.restart.reboot_keeps_allocations hw.restart.reboot_keeps_header; do
		fail "$t" "no device"
	done
	exit 1
fi
UUID0=$(cat /mnt/host/uuid)
rm_start --host 127.0.0.1 --port 9850 --state-dir /mnt/host/state --log-level debug --grace-period 3600 ||
	{ dump_logs; for t in $T; do fail "$t" "resource manager did not start"; done; exit 1; }
U=$(field uuid "$($P header /dev/dax0.0)")
if [ -n "$U" ] && [ "$U" = "$UUID0" ]; then
	pass hw.restart.reboot_keeps_header "uuid $U"
else
	fail hw.restart.reboot_keeps_header "uuid $UUID0 before, $U after the reboot"
fi
ok=1 why="" n=0
for h in $(cat /mnt/host/handles); do
	IFS=: read -r r o l t s <<EOF
$h
EOF
	acc=$($P rm-access $RMADDR "$r" "$o" "$l" "$t")
	echo "$acc"
	if [ "$(field status "$acc")" != 0 ] || [ "$(field offset "$acc")" != "$o" ] ||
		[ "$(field uuid "$acc")" != "$UUID0" ]; then
		ok=0; why="$why region $r: $acc;"
	elif ! $P check /dev/dax0.0 "$o" "$l" "$s" >/dev/null; then
		ok=0; why="$why region $r lost its bytes;"
	fi
	n=$((n + 1))
done
F=$(field free "$(pool_line /dev/dax0.0)")
if [ $ok = 1 ] && [ "$F" = "$(cat /mnt/host/free)" ] && [ $n = 3 ]; then
	pass hw.restart.reboot_keeps_allocations "$n regions with their tokens, offsets and bytes after a power cut and reboot; free $F"
else
	fail hw.restart.reboot_keeps_allocations "$why free $F (want $(cat /mnt/host/free)), $n handles"
fi
rm_stop TERM
dump_logs
exit 0
