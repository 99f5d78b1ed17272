#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/hw/lib/run-guest.sh - boot one throw-away qemu guest (TCG) with
# emulated NVDIMM / CXL memory and run a script in it.
#
#   run-guest.sh [-n NAME] [-o LOGDIR] [-H HOSTNAME] [-p FILE:SIZE[:LABEL]]...
#                [-x FILE:SIZE] [-s SCRIPT] [-f FILE]... [-9 DIR]
#                [-L LPORT:RPORT:ADDR/NN:MACBYTE] [-N HOSTPORT:GUESTPORT]...
#                [-m MEM] [-c CPUS] [-t SECS] [-a "KERNEL ARGS"] [-q "QEMU ARGS"] [-i]
#
#   -p FILE:SIZE[:LABEL] NVDIMM backed by FILE (created sparse with SIZE if
#                        absent) with share=on: guest stores land in FILE and
#                        other guests on the same FILE see them.  LABEL =
#                        label-size (e.g. 128K); omit for a label-less DIMM.
#   -x FILE:SIZE         CXL type-3 pmem backed by FILE, blank label storage
#                        per boot; run hw-cxl-devdax in the guest.
#   -s SCRIPT            guest script, run by init as /test/run.sh (busybox sh)
#   -f FILE              copied to /test/ (ELF: plus the shared libraries the
#                        base image lacks, at their host paths)
#   -9 DIR               host DIR shared read-write at /mnt/host (virtio-9p)
#   -L LPORT:RPORT:ADDR/NN:MACBYTE
#                        a guest-to-guest Ethernet link: a virtio NIC whose
#                        frames go as UDP datagrams from 127.0.0.1:LPORT to
#                        127.0.0.1:RPORT; the peer guest swaps the ports.
#                        The guest configures ADDR/NN on it.  MACBYTE (two hex
#                        digits) makes the MAC unique per guest.
#   -N HOSTPORT:GUESTPORT forward host 127.0.0.1:HOSTPORT to the guest port
#   -H HOSTNAME          guest hostname (default NAME)
#   -m/-c/-t             guest RAM (512M) / vCPUs (1) / wall-clock limit (300 s)
#   -o LOGDIR            where NAME.log (the serial console) goes
#   -i                   interactive console (Ctrl-A x quits)
#
# Exit: the guest script's exit code; 124 on timeout; 125 when the guest
# ended without reporting one (kernel panic, qemu failure: see the log).
set -euo pipefail
. "$(dirname "$0")/common.sh"
NAME=guest LOGDIR=$HW_CACHE/logs HOST="" MEM=512M CPUS=1 APPEND="" QEXTRA="" TMO=300
SCRIPT="" INTER=0 SHARE9P=""
PMEMS=() CXLS=() FILES=() FWDS=() LINKS=()
while getopts "n:o:H:p:x:s:f:9:L:N:m:c:t:a:q:i" o; do
	case $o in
	n) NAME=$OPTARG ;; o) LOGDIR=$OPTARG ;; H) HOST=$OPTARG ;;
	p) PMEMS+=("$OPTARG") ;; x) CXLS+=("$OPTARG") ;; s) SCRIPT=$OPTARG ;;
	f) FILES+=("$OPTARG") ;; 9) SHARE9P=$OPTARG ;; L) LINKS+=("$OPTARG") ;;
	N) FWDS+=("$OPTARG") ;; m) MEM=$OPTARG ;; c) CPUS=$OPTARG ;;
	t) TMO=$OPTARG ;; a) APPEND=$OPTARG ;; q) QEXTRA=$OPTARG ;; i) INTER=1 ;;
	*) sed -n '2,35p' "$0"; exit 2 ;;
	esac
done
[ -s "$HW_CACHE/vmlinuz" ] || { echo "run-guest: no guest image, run build-image.sh" >&2; exit 125; }
mkdir -p "$LOGDIR"

# --- payload cpio appended to the base initramfs (concatenation is legal) ---
W=$(mktemp -d "${TMPDIR:-/tmp}/maru-hw-$NAME.XXXXXX")
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/p/test"
[ -n "$SCRIPT" ] && cp "$SCRIPT" "$W/p/test/run.sh"
for f in "${FILES[@]}"; do
	cp "$f" "$W/p/test/"
	if head -c 4 "$f" | grep -q ELF; then
		for l in $(ldd "$f" 2>/dev/null | awk '/=>/{print $3}'); do
			grep -qx ".$l" "$HW_CACHE/base.list" && continue
			mkdir -p "$W/p$(dirname "$l")"
			cp -L "$l" "$W/p$l"
			# a build-tree library (RUNPATH) may sit where the guest
			# mounts a tmpfs (/tmp): /test/lib is on LD_LIBRARY_PATH
			case $l in
			/lib/* | /lib64/* | /usr/lib/* | /usr/lib64/*) ;;
			*) mkdir -p "$W/p/test/lib" && cp -L "$l" "$W/p/test/lib/" ;;
			esac
		done
	fi
done
(cd "$W/p" && find . | cpio -o -H newc --quiet | gzip -1) >"$W/payload.cpio.gz"
cat "$HW_CACHE/base.cpio.gz" "$W/payload.cpio.gz" >"$W/initrd.gz"

# --- NVDIMMs ---
DEV=() i=0 total=0
for spec in "${PMEMS[@]}"; do
	IFS=: read -r file size label <<<"$spec"
	[ -e "$file" ] || truncate -s "$size" "$file"
	bytes=$(stat -c %s "$file")
	DEV+=(-object "memory-backend-file,id=nvmem$i,share=on,mem-path=$file,size=$bytes,align=2M"
	      -device "nvdimm,id=nvdimm$i,memdev=nvmem$i${label:+,label-size=$label}")
	total=$((total + bytes)); i=$((i + 1))
done
MACH="pc" SLOTS=""
if [ $i -gt 0 ]; then
	MACH="pc,nvdimm=on"
	SLOTS=",slots=$((i + 1)),maxmem=$(((total >> 20) + 4096))M"
fi

# --- CXL type-3 pmem: one host bridge with two root ports (qemu 7.2 loses
#     data behind a single-root-port bridge, see the reference's pitfalls) ---
j=0
if [ ${#CXLS[@]} -gt 0 ]; then
	DEV+=(-device "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1")
	nrp=${#CXLS[@]}; [ "$nrp" -lt 2 ] && nrp=2
	for r in $(seq 0 $((nrp - 1))); do
		DEV+=(-device "cxl-rp,port=$r,bus=cxl.1,id=cxl_rp$r,chassis=0,slot=$((r + 2))")
	done
	for spec in "${CXLS[@]}"; do
		IFS=: read -r file size <<<"$spec"
		[ -e "$file" ] || truncate -s "$size" "$file"
		truncate -s 1M "$W/cxl$j.lsa"
		DEV+=(-object "memory-backend-file,id=cxlmem$j,share=on,mem-path=$file,size=$(stat -c %s "$file")"
		      -object "memory-backend-file,id=cxllsa$j,share=on,mem-path=$W/cxl$j.lsa,size=1M"
		      -device "cxl-type3,bus=cxl_rp$j,memdev=cxlmem$j,lsa=cxllsa$j,id=cxl-pmem$j")
		j=$((j + 1))
	done
	MACH="q35,cxl=on,cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G${MACH#pc}"
	[ -n "$SLOTS" ] || SLOTS=",slots=4,maxmem=8G"
fi

# --- NICs ---
k=0
for l in "${LINKS[@]}"; do
	IFS=: read -r lport rport addr macb <<<"$l"
	DEV+=(-netdev "socket,id=link$k,udp=127.0.0.1:$rport,localaddr=127.0.0.1:$lport"
	      -device "virtio-net-pci,netdev=link$k,mac=52:54:00:4d:$(printf %02x "$k"):${macb:-01}")
	APPEND="$APPEND maru.ip=$addr"
	k=$((k + 1))
done
if [ ${#FWDS[@]} -gt 0 ]; then
	nd="user,id=n0,restrict=on"
	for f in "${FWDS[@]}"; do nd="$nd,hostfwd=tcp:127.0.0.1:${f%%:*}-:${f##*:}"; done
	DEV+=(-netdev "$nd" -device "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56")
	APPEND="$APPEND maru.slirp"
fi
if [ -n "$SHARE9P" ]; then
	DEV+=(-virtfs "local,path=$SHARE9P,mount_tag=host,security_model=none")
	APPEND="$APPEND maru.9p"
fi

# TCG only (KVM is unusable on these machines).  -cpu max offers RDRAND, so
# the guest's crng is ready at once; with qemu64, ndctl create-namespace
# blocks for seconds in getrandom().
QEMU=("$HW_QEMU" -accel "tcg,thread=multi" -cpu "${MARU_HW_CPU:-max}"
      -machine "$MACH" -smp "$CPUS" -m "$MEM$SLOTS" -display none -no-reboot -nic none
      -kernel "$HW_CACHE/vmlinuz" -initrd "$W/initrd.gz"
      -append "console=ttyS0 quiet panic=-1 maru.host=${HOST:-$NAME} $APPEND" "${DEV[@]}")
# shellcheck disable=SC2206
[ -n "$QEXTRA" ] && QEMU+=($QEXTRA)

if [ $INTER = 1 ]; then
	"${QEMU[@]}" -serial mon:stdio
	exit $?
fi
LOG=$LOGDIR/$NAME.log
set +e
# sed -u: the log is read while the guest runs (run.sh waits for lines)
timeout "$TMO" "${QEMU[@]}" -serial stdio </dev/null 2>&1 | sed -u 's/\r//g' >"$LOG"
st=${PIPESTATUS[0]}
set -e
if [ "$st" = 124 ]; then
	echo "run-guest: $NAME timed out after ${TMO}s (log $LOG)" >&2
	exit 124
fi
rc=$(sed -n 's/^MARU-HW-RC=\([0-9]*\).*/\1/p' "$LOG" | tail -1)
[ -n "$rc" ] || { echo "run-guest: $NAME: no MARU-HW-RC line (qemu status $st), see $LOG" >&2; exit 125; }
exit "$rc"
