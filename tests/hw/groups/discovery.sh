# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Group "discovery": maru-resource-manager finds a real device-DAX device by
# itself (no --pool) through libdaxctl, reports it correctly, writes the
# MARUDEV header onto the medium, hands out aligned regions that map at
# their offsets, and adds a second namespace on SIGHUP.
#
# One guest with a labelled NVDIMM (128 KiB label area, so that the region
# can hold two namespaces, see the reference's pitfalls 3-4): dax0.0 (64 MiB)
# at start, dax0.1 (48 MiB) created while the daemon runs.  The host then
# reads the backing file: the header and the written regions must be where
# sysfs says dax0.0's bytes live.
TESTS_discovery=(
	hw.discovery.found_by_libdaxctl
	hw.discovery.stats_size_align
	hw.discovery.pool_monitor_csv
	hw.discovery.header_written
	hw.discovery.alloc_alignment
	hw.discovery.mmap_at_offsets
	hw.discovery.sighup_adds_pool
	hw.discovery.clean_stop
	hw.discovery.host_sees_header
	hw.discovery.host_sees_regions
)

group_discovery() {
	local img=$W/disc.img log=$OUT/logs/disc.log off uuid hh ok why k o l
	[ -n "$WHY_RM" ] && { skip_all discovery "$WHY_RM"; return; }
	guest disc discovery.sh -p "$img:130M:128K"
	collect "$log"

	# host side: the header is in the backing file where dax0.0 begins
	off=$(kvget "$log" dax0.0.data_offset)
	uuid=$(kvget "$log" dax0.0.uuid)
	if [ -n "$off" ] && [ -n "$uuid" ]; then
		hh=$("$PROBE" header "$img" "$off")
		if [ "$(echo "$hh" | grep -o 'uuid=[^ ]*')" = "uuid=$uuid" ] &&
			echo "$hh" | grep -q 'version=1 '; then
			pass hw.discovery.host_sees_header "backing file offset $off: $hh"
		else
			fail hw.discovery.host_sees_header "backing file offset $off: $hh (guest saw uuid $uuid)"
		fi
		ok=1 why=""
		for k in 100 101 102 103 104; do
			IFS=: read -r o l <<<"$(kvget "$log" "region.$k")"
			[ -n "$o" ] || { ok=0; why="$why region.$k not reported;"; continue; }
			"$PROBE" check "$img" $((off + o)) "$l" "$k" >/dev/null ||
				{ ok=0; why="$why seed $k not at file offset $((off + o));"; }
		done
		if [ $ok = 1 ]; then
			pass hw.discovery.host_sees_regions "each region's pattern at file offset $off + handle offset"
		else
			fail hw.discovery.host_sees_regions "$why"
		fi
	else
		fail hw.discovery.host_sees_header "the guest reported no data offset/uuid (see its failures)"
		fail hw.discovery.host_sees_regions "the guest reported no data offset/uuid (see its failures)"
	fi
}
