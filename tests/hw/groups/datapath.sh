# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Group "datapath": the whole data path on a real device.  In one guest with
# a label-less NVDIMM (dax0.0), the resource manager (discovery) and
# maru-server run; maru-example stores and retrieves chunks (it verifies
# the bytes itself), and maru-hwhold stores one through libmaru with the
# probe's pattern.  The probe finds each chunk independently (LOOKUP_KV +
# GET_ACCESS) and reads it on /dev/dax0.0; the host then finds the very same
# bytes in the backing file at dax0.0's data offset + device offset.
TESTS_datapath=(
	hw.data.example_store_retrieve
	hw.data.example_bytes_on_device
	hw.data.libmaru_pattern_on_device
	hw.data.host_sees_example_bytes
	hw.data.host_sees_libmaru_pattern
)

group_datapath() {
	local img=$W/data.img log=$OUT/logs/data.log base o n f s
	[ -n "$WHY_RM" ] && { skip_all datapath "$WHY_RM"; return; }
	[ -n "$WHY_MDS" ] && { skip_all datapath "$WHY_MDS"; return; }
	guest data datapath.sh -p "$img:256M"
	collect "$log"
	base=$(kvget "$log" dax0.0.data_offset)

	o=$(kvget "$log" ex.devoff) n=$(kvget "$log" ex.len) f=$(kvget "$log" ex.fnv)
	if [ -n "$WHY_EX" ]; then
		skip hw.data.host_sees_example_bytes "$WHY_EX"
	elif [ -n "$base" ] && [ -n "$o" ] && [ -n "$f" ]; then
		s=$("$PROBE" sum "$img" $((base + o)) "$n")
		if echo "$s" | grep -q "fnv=$f\$"; then
			pass hw.data.host_sees_example_bytes "file offset $base+$o: fnv $f, as the guest read it"
		else
			fail hw.data.host_sees_example_bytes "file offset $base+$o: $s, guest read fnv $f"
		fi
	else
		fail hw.data.host_sees_example_bytes "the guest reported no chunk location (see its failures)"
	fi

	o=$(kvget "$log" hold.devoff) n=$(kvget "$log" hold.len)
	if [ -n "$WHY_HOLD" ]; then
		skip hw.data.host_sees_libmaru_pattern "$WHY_HOLD"
	elif [ -n "$base" ] && [ -n "$o" ]; then
		if "$PROBE" check "$img" $((base + o)) "$n" 9 >/dev/null; then
			pass hw.data.host_sees_libmaru_pattern "exact pattern at file offset $base+$o"
		else
			fail hw.data.host_sees_libmaru_pattern "pattern not at file offset $base+$o"
		fi
	else
		fail hw.data.host_sees_libmaru_pattern "the guest reported no chunk location (see its failures)"
	fi
}
