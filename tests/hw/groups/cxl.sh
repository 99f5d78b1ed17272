# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Group "cxl": the same discovery on an emulated CXL type-3 memory device
# (q35 with a CXL host bridge, two root ports, a persistent-memory type-3
# device), the other route to /dev/dax besides an NVDIMM.  The RM must find
# it through libdaxctl, and the host must see the region's bytes and the
# header in the backing file.
TESTS_cxl=(
	hw.cxl.found_by_libdaxctl
	hw.cxl.alloc_and_map
	hw.cxl.host_sees_bytes
)

group_cxl() {
	local img=$W/cxl.img log=$OUT/logs/cxl.log base o u
	[ -n "$WHY_RM" ] && { skip_all cxl "$WHY_RM"; return; }
	guest cxl cxl.sh -x "$img:256M"
	collect "$log"
	base=$(kvget "$log" dax0.0.data_offset) o=$(kvget "$log" cxl.devoff) u=$(kvget "$log" cxl.uuid)
	if [ -n "$base" ] && [ -n "$o" ]; then
		if "$PROBE" check "$img" $((base + o)) 65536 41 >/dev/null &&
			"$PROBE" header "$img" "$base" | grep -q "uuid=$u "; then
			pass hw.cxl.host_sees_bytes "header and region at backing file offset $base (+$o)"
		else
			fail hw.cxl.host_sees_bytes "not at backing file offset $base+$o: $("$PROBE" header "$img" "$base")"
		fi
	else
		fail hw.cxl.host_sees_bytes "the guest reported no region (see its failures)"
	fi
}
