#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/hw/lib/build-image.sh - build (once, cached) the guest kernel and
# the base initramfs of the device-DAX test guests.
#
# Everything comes from Debian packages at test time and lands in HW_CACHE
# (see common.sh); nothing here is committed.  Adapted from the recorded
# earlier experiment (docs/hardware.md).
#
#   build-image.sh          build unless the cache is current
#   MARU_HW_REBUILD=1       rebuild anyway
#
# Produces: $HW_CACHE/vmlinuz, $HW_CACHE/base.cpio.gz, $HW_CACHE/base.list
# (the files in the base image, so that run-guest.sh copies only the
# shared libraries the base lacks) and $HW_CACHE/stamp.
#
# The cache is current when the stamp holds the same kernel package and the
# same checksum of this script.  Concurrent runs serialise on a lock file.
# Exit: 0 built or cached; 1 on failure (the reason on stderr).
set -euo pipefail
. "$(dirname "$0")/common.sh"
mkdir -p "$HW_CACHE"
exec 9>"$HW_CACHE/build.lock"
flock 9

kpkg_name() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}
KPKG=$(kpkg_name)
if [ -z "$KPKG" ]; then
	apt-get update -qq >/dev/null 2>&1 || true
	KPKG=$(kpkg_name)
fi
[ -n "$KPKG" ] || { echo "no linux-image-amd64 candidate in apt" >&2; exit 1; }
STAMP="$KPKG $(sha256sum "$0" | cut -c1-16)"
cd "$HW_CACHE"
if [ "${MARU_HW_REBUILD:-0}" != 1 ] && [ -s vmlinuz ] && [ -s base.cpio.gz ] &&
	[ -s base.list ] && [ "$(cat stamp 2>/dev/null)" = "$STAMP" ]; then
	exit 0
fi
rm -f stamp

hw_apt_install "${HW_DEB_PACKAGES[@]}" ||
	{ echo "apt-get install failed, see $HW_CACHE/apt.log" >&2; exit 1; }

# --- kernel: the Debian kernel .deb, downloaded (not installed) ---
mkdir -p debs
if ! ls debs/"$KPKG"_*.deb >/dev/null 2>&1; then
	rm -f debs/*.deb
	# as root apt warns that the download is unsandboxed: harmless
	(cd debs && { apt-get download -q "$KPKG" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 && apt-get download -q "$KPKG"; }; })
fi
DEB=$(ls debs/"$KPKG"_*.deb | head -1)
rm -rf kpkg && mkdir kpkg && dpkg-deb -x "$DEB" kpkg
KVER=$(ls kpkg/lib/modules | head -1)
cp kpkg/boot/vmlinuz-"$KVER" vmlinuz.new

# --- initramfs tree ---
R=$HW_CACHE/root
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,proc,sys,dev,tmp,run,etc,mnt,test,var/tmp}
cp /bin/busybox "$R"/bin/busybox

# Modules: NVDIMM (nfit), legacy e820 pmem, device-DAX, CXL type-3, virtio
# (9p share, NIC), and everything they depend on; then depmod the subset.
MODS="nfit libnvdimm nd_pmem nd_btt nd_e820 dax_pmem device_dax kmem dax_hmem
      cxl_acpi cxl_pci cxl_mem cxl_pmem cxl_port
      virtio virtio_ring virtio_pci virtio_pci_legacy_dev virtio_pci_modern_dev
      9p 9pnet 9pnet_virtio netfs fscache virtio_net"
MD=kpkg/lib/modules/$KVER
copy_mod() {	# $1 = path under $MD
	mkdir -p "$R/lib/modules/$KVER/$(dirname "${1#"$MD"/}")"
	cp "$1" "$R/lib/modules/$KVER/${1#"$MD"/}"
}
for m in $MODS; do
	f=$(find "$MD" -name "$m.ko*" | head -1)
	[ -n "$f" ] && copy_mod "$f"	# else built in (or absent)
done
while :; do
	added=0
	for f in $(find "$R/lib/modules/$KVER" -name '*.ko*'); do
		for d in $(modinfo -F depends "$f" | tr ',' ' '); do
			[ -n "$(find "$R/lib/modules/$KVER" -name "$d.ko*")" ] && continue
			copy_mod "$(find "$MD" -name "$d.ko*" | head -1)"
			added=1
		done
	done
	[ $added = 0 ] && break
done
cp "$MD"/modules.order "$MD"/modules.builtin "$MD"/modules.builtin.modinfo \
	"$R/lib/modules/$KVER/" 2>/dev/null || true
depmod -b "$R" "$KVER"

# ndctl, daxctl, cxl and the shared libraries ldd names
copy_bin() {
	local b=$1 l
	cp -L "$b" "$R$b"
	for l in $(ldd "$b" | awk '/=>/{print $3} /^\s*\/lib64/{print $1}'); do
		[ -f "$R$l" ] || { mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"; }
	done
}
for b in /usr/bin/ndctl /usr/bin/daxctl /usr/bin/cxl; do copy_bin "$b"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$R"/lib64/
mkdir -p "$R"/etc/ndctl.conf.d "$R"/etc/daxctl.conf.d
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$R"/etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' >"$R"/etc/group

# /init: mounts, hostname, modules, optional 9p share and NICs, then the
# test script /test/run.sh; its exit code travels as a MARU-HW-RC=N line.
#   maru.host=NAME      hostname (client ids are "<hostname>:<pid>", and the
#                       resource manager treats ids with its own hostname as
#                       local processes: each guest must have its own name)
#   maru.ip=A.B.C.D/N   address of the guest-to-guest link NIC (MAC 52:54:00:4d:..)
#   maru.slirp          user-mode NIC (MAC 52:54:00:12:34:56) as 10.0.2.15/24
#   maru.9p             mount the host share (tag "host") on /mnt/host
cat >"$R"/init <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
export LD_LIBRARY_PATH=/test/lib
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm
arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p" | tail -1; }
hostname "$(arg maru.host | grep . || echo maru-hw)"
for m in nfit nd_e820 nd_pmem dax_pmem device_dax; do modprobe $m 2>/dev/null; done
if grep -q 0x050210 /sys/bus/pci/devices/*/class 2>/dev/null; then
	for m in cxl_acpi cxl_pci cxl_mem cxl_port cxl_pmem; do modprobe $m 2>/dev/null; done
fi
if grep -qw maru.9p /proc/cmdline; then
	modprobe virtio_pci; modprobe 9pnet_virtio; modprobe 9p
	mkdir -p /mnt/host && mount -t 9p -o trans=virtio,version=9p2000.L,cache=none host /mnt/host
fi
ip link set lo up
if grep -q 'maru.ip=\|maru.slirp' /proc/cmdline; then
	modprobe virtio_pci; modprobe virtio_net
	for n in /sys/class/net/eth*; do
		[ -e "$n" ] || continue
		dev=${n##*/}; mac=$(cat "$n/address")
		case $mac in
		52:54:00:4d:*) a=$(arg maru.ip) ;;
		52:54:00:12:34:56) a=10.0.2.15/24 ;;
		*) a= ;;
		esac
		[ -n "$a" ] || continue
		ip link set "$dev" up && ip addr add "$a" dev "$dev"
		case $mac in 52:54:00:12:34:56) ip route add default via 10.0.2.2 ;; esac
	done
fi
echo "maru-hw: $(hostname) up at $(cut -d' ' -f1 /proc/uptime)s"
if [ -f /test/run.sh ]; then
	cd /test && sh ./run.sh; rc=$?
	echo; echo "MARU-HW-RC=$rc"
else
	echo "maru-hw: no /test/run.sh; shell"
	setsid cttyhack sh
fi
sync
poweroff -f
INIT
chmod +x "$R"/init

# CXL type-3 pmem -> region -> devdax namespace -> /dev/daxN.0, once per boot
# (Linux 6.1 cannot re-read the labels it wrote on CXL; see the reference)
cat >"$R"/bin/hw-cxl-devdax <<'HELPER'
#!/bin/sh
mems=${*:-$(ls /sys/bus/cxl/devices | grep '^mem[0-9]')}
for m in $mems; do
	cxl create-region -t pmem -d decoder0.0 -m "$m" -w 1 -g 256 >/dev/null || exit 1
done
sleep 0.5
for r in $(ndctl list -R | sed -n 's/.*"dev":"\(region[0-9]*\)".*/\1/p'); do
	ndctl create-namespace -r "$r" -m devdax --map=mem >/dev/null || exit 1
done
HELPER
chmod +x "$R"/bin/hw-cxl-devdax

(cd "$R" && find . >"$HW_CACHE"/base.list.new &&
	cpio -o -H newc --quiet <"$HW_CACHE"/base.list.new | gzip -1 >"$HW_CACHE"/base.cpio.gz.new)
mv vmlinuz.new vmlinuz
mv base.list.new base.list
mv base.cpio.gz.new base.cpio.gz
echo "$KVER" >kver
rm -rf kpkg "$R"	# ~400 MB unpacked; the .deb stays cached in debs/
echo "$STAMP" >stamp
hw_log "guest image: kernel $KVER, initramfs $(du -h base.cpio.gz | cut -f1) in $HW_CACHE"
