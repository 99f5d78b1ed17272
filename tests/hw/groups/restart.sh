# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Group "restart": acknowledged allocations and the device header survive a
# restart of the resource manager (SIGTERM, then SIGKILL right after an
# acknowledged allocation) and a reboot of the guest on the same backing
# file after a power cut (the daemon is SIGKILLed, then poweroff -f).  The
# state directory lives on the host and is shared into both boots over
# virtio-9p, as a disk would be on a real machine.
TESTS_restart=(
	hw.restart.clean_restart_keeps_allocations
	hw.restart.header_survives_restart
	hw.restart.crash_restart_keeps_acknowledged
	hw.restart.no_overlap_after_restart
	hw.restart.reboot_finds_devdax
	hw.restart.reboot_keeps_allocations
	hw.restart.reboot_keeps_header
)

group_restart() {
	local img=$W/restart.img share=$W/share
	[ -n "$WHY_RM" ] && { skip_all restart "$WHY_RM"; return; }
	rm -rf "$share" && mkdir -p "$share"
	guest restart-1 restart_1.sh -p "$img:256M" -9 "$share"
	collect "$OUT/logs/restart-1.log"
	guest restart-2 restart_2.sh -p "$img:256M" -9 "$share"
	collect "$OUT/logs/restart-2.log"
	rm -rf "$share"
}
