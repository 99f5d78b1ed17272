#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# systemd_boot.sh - boot this machine's systemd as PID 1 of private
# namespaces, with Maru installed, for test_systemd_units.py's opt-in
# test_units_under_systemd (MARU_SYSTEMD_BOOT=1).
#
#   systemd_boot.sh BUILD_DIR REPO WORKDIR CGROUP
#
# Run as root inside `unshare -m --propagation private`, so that every
# mount below vanishes with it.  The root is an overlay of / whose upper
# layer is a tmpfs in WORKDIR: whatever the booted system writes (users,
# journal, state directories, the units installed by
# `DESTDIR=<root> cmake --install BUILD_DIR --prefix /usr/local`) stays
# there.  Its own pid, UTS, IPC and network namespaces; a cgroup2
# namespace rooted at CGROUP (an empty cgroup the caller created), so
# systemd manages only that subtree; a /dev with the pseudo devices only
# and a /dev/shm of its own; /proc/sys and /sys read-only.  Units that
# would touch the shared kernel (sysctl, modules, binfmt, pstore, udev,
# static nodes, TPM, repartitioning) and the image's own services are
# masked.  The caller ends it by killing PID 1 of the namespace (the
# child of the process this script becomes).
set -euo pipefail
BUILD=$1 REPO=$2 W=$3 CG=$4
mount -t tmpfs -o size=4G tmpfs "$W"
mkdir "$W/upper" "$W/work" "$W/root"
R=$W/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$W/upper,workdir=$W/work" "$R"
# a first boot: whatever state of ours the host has stays out (removed in
# the overlay only; the host's directories are untouched)
rm -rf "$R"/var/lib/maru-server "$R"/var/lib/private/maru-server \
	"$R"/var/lib/maru-resourced "$R"/var/lib/private/maru-resourced
DESTDIR=$R cmake --install "$BUILD" --prefix /usr/local >/dev/null
# the tree (its .venv and the test scripts), wherever it is mounted
mkdir -p "$R$REPO"
mount --rbind "$REPO" "$R$REPO"

rm -f "$R"/etc/systemd/system/*.wants/*
for u in systemd-sysctl.service systemd-modules-load.service \
	systemd-binfmt.service proc-sys-fs-binfmt_misc.automount \
	proc-sys-fs-binfmt_misc.mount systemd-pstore.service \
	systemd-repart.service systemd-pcrphase-sysinit.service \
	systemd-pcrphase.service systemd-random-seed.service \
	systemd-firstboot.service systemd-machine-id-commit.service \
	kmod-static-nodes.service systemd-tmpfiles-setup-dev.service \
	systemd-hwdb-update.service sys-kernel-config.mount \
	systemd-udevd.service systemd-udevd-control.socket \
	systemd-udevd-kernel.socket systemd-udev-trigger.service \
	systemd-udev-settle.service systemd-networkd.service \
	systemd-resolved.service systemd-timesyncd.service \
	systemd-logind.service getty.target console-getty.service \
	e2scrub_reap.service e2scrub_all.timer fstrim.timer apt-daily.timer \
	apt-daily-upgrade.timer redis-server.service postgresql.service \
	ndctl-monitor.service; do
	ln -sf /dev/null "$R/etc/systemd/system/$u"
done

# a /dev as systemd-nspawn makes one
mount -t tmpfs -o mode=755 tmpfs "$R/dev"
for n in null zero full random urandom tty; do
	touch "$R/dev/$n"
	mount --bind "/dev/$n" "$R/dev/$n"
done
mkdir "$R/dev/shm" "$R/dev/pts" "$R/dev/mqueue"
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s pts/ptmx "$R/dev/ptmx"

echo $$ >"$CG/cgroup.procs"
exec unshare --pid --fork --uts --ipc --net --cgroup bash -c "
	set -e
	mount -t proc proc '$R/proc'
	mount --bind -o ro '$R/proc/sys' '$R/proc/sys'
	mount -t sysfs -o ro sysfs '$R/sys'
	mount -t cgroup2 cgroup2 '$R/sys/fs/cgroup'
	mount -t devpts -o newinstance,ptmxmode=0666 devpts '$R/dev/pts'
	mkdir -p '$R/.oldroot'
	cd '$R'
	pivot_root . .oldroot
	umount -l /.oldroot
	rmdir /.oldroot
	exec chroot / /usr/bin/env container=maru-test /lib/systemd/systemd \
		--system --log-target=journal --show-status=no
"
