# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Group "failloud": devices the resource manager must refuse at start-up
# with a clear error, never serving a wrong mapping, and never writing to
# them: an alignment that is not a power of two, an alignment above the
# supported maximum (both reported through libdaxctl by bind-mounting a
# file over the sysfs align attributes, since the kernel itself only makes
# 4 KiB, 2 MiB and 1 GiB), a device too small for the header unit plus one
# region (a real 1 GiB device with 1 GiB alignment), and a device the daemon
# cannot open (running as nobody).  Each refusal is checked with --pool and
# with discovery; a control start on the healthy device must work.
TESTS_failloud=(
	hw.fail.align_not_power_of_two
	hw.fail.align_too_big
	hw.fail.cannot_open
	hw.fail.control_starts
	hw.fail.too_small
)

group_failloud() {
	[ -n "$WHY_RM" ] && { skip_all failloud "$WHY_RM"; return; }
	GUEST_ENV=FAIL_CASE=align guest fail-align failloud.sh -p "$W/align.img:256M"
	collect "$OUT/logs/fail-align.log"
	GUEST_ENV=FAIL_CASE=small guest fail-small failloud.sh -p "$W/small.img:2G"
	collect "$OUT/logs/fail-small.log"
}
