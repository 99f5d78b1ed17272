# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Group "twohost": two hosts on one pool, the emulated CXL switch.  Two
# guests map the same backing file (share=on) and are joined by a private
# Ethernet link (qemu "socket" netdevs exchanging UDP datagrams on the
# host's loopback: 10.0.3.1 = A, 10.0.3.2 = B).  A formats the medium and
# runs the one resource manager and the one metadata server; clients on both
# hosts store and retrieve through their own mappings.  B sees the shared
# medium as /dev/dax1.0 (its first NVDIMM is private), so the MARUDEV UUID
# mapping is what makes B's reads right.  Then a libmaru worker on B is
# killed with SIGKILL: its region must become owner-gone within the lease
# bound, its stored chunk must stay readable, and deleting that last key
# must free the region at the resource manager.  A second worker that owns
# only an empty region is killed too: that region must go back at once.
# Before B boots, A kills its maru-server with SIGKILL five times in the
# middle of a store loop: every acknowledged store must come back
# in place with its bytes, every acknowledged delete stay deleted, and B
# reads all those chunks after the last restart.  B also reads A's chunk
# through the shared index that A's maru-server keeps in a
# region of the pool with --coherence flush (the default on device-DAX),
# with no request, and sees a delete there at once.
TESTS_twohost=(
	hw.two.a_stores
	hw.two.mds_crash_cycles
	hw.two.b_shared_is_dax1
	hw.two.uuid_maps_to_local_path
	hw.two.b_probe_reads_a
	hw.two.b_example_retrieves_a
	hw.two.b_reads_after_restart
	hw.two.b_libmaru_retrieves_a
	hw.two.b_index_reads_a
	hw.two.b_index_sees_delete
	hw.two.b_stores
	hw.two.a_retrieves_b
	hw.two.killed_client_owner_gone
	hw.two.killed_client_data_kept
	hw.two.killed_client_region_freed
	hw.two.killed_client_empty_region_freed
	hw.two.host_sees_a_bytes
)

group_twohost() {
	local shared=$W/shared.img priv=$W/privb.img pa pb ga i base o
	local la=$OUT/logs/two-a.log lb=$OUT/logs/two-b.log
	[ -n "$WHY_RM" ] && { skip_all twohost "$WHY_RM"; return; }
	[ -n "$WHY_MDS" ] && { skip_all twohost "$WHY_MDS"; return; }
	pa=$(free_udp_port) pb=$(free_udp_port)
	while [ "$pb" = "$pa" ]; do pb=$(free_udp_port); done
	guest two-a twohost_a.sh -H hw-host-a -p "$shared:512M" \
		-L "$pa:$pb:10.0.3.1/24:01" &
	ga=$!
	# B boots once A has formatted the medium and both daemons listen
	for i in $(seq 1 "$GUEST_TMO"); do
		grep -q '^HWREADY' "$la" 2>/dev/null && break
		kill -0 "$ga" 2>/dev/null || break
		sleep 1
	done
	if grep -q '^HWREADY' "$la" 2>/dev/null; then
		guest two-b twohost_b.sh -H hw-host-b -p "$priv:64M" -p "$shared:512M" \
			-L "$pb:$pa:10.0.3.2/24:02"
	fi
	wait "$ga"
	collect "$la"
	if grep -q '^HWREADY' "$la" 2>/dev/null; then
		collect "$lb"
	else
		for i in "${TESTS_twohost[@]}"; do
			case $i in hw.two.a_* | hw.two.host_*) ;; *)
				has_result "$i" || fail "$i" "host A never got ready, B not booted: $(grep -m1 '^HWT FAIL' "$la" | cut -d' ' -f4-)" ;;
			esac
		done
	fi

	base=$(kvget "$la" dax0.0.data_offset) o=$(kvget "$la" a2.devoff)
	if [ -n "$WHY_HOLD" ]; then
		skip hw.two.host_sees_a_bytes "$WHY_HOLD"
	elif [ -n "$base" ] && [ -n "$o" ]; then
		if "$PROBE" check "$shared" $((base + o)) 300000 22 >/dev/null; then
			pass hw.two.host_sees_a_bytes "A's chunk at shared file offset $base+$o"
		else
			fail hw.two.host_sees_a_bytes "A's pattern not at shared file offset $base+$o"
		fi
	else
		fail hw.two.host_sees_a_bytes "host A reported no chunk location (see its failures)"
	fi
}
