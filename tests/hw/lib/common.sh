# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# tests/hw/lib/common.sh - shared helpers of the QEMU device-DAX harness.
#
# Sourced by run.sh, build-image.sh and run-guest.sh.  Sets:
#   HW_CACHE   where everything fetched from Debian packages is cached
#              (kernel .deb, vmlinuz, base initramfs); nothing is committed.
#              ${MARU_HW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/maru-hw}
#   HW_LIB     this directory
#   HW_QEMU    the qemu binary
HW_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HW_CACHE=${MARU_HW_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/maru-hw}
export HW_CACHE
# the emulator (MARU_HW_QEMU overrides it, e.g. to check the skip path)
HW_QEMU=${MARU_HW_QEMU:-qemu-system-x86_64}

# The Debian packages the harness needs on the host.  qemu and busybox run
# the guests; cpio/kmod build the initramfs; ndctl/daxctl go into it.
HW_DEB_PACKAGES=(qemu-system-x86 busybox-static cpio kmod ndctl daxctl gzip)

hw_log() { printf 'hw: %s\n' "$*" >&2; }

# hw_missing_packages: print the packages of HW_DEB_PACKAGES not installed
hw_missing_packages() {
	local p
	for p in "${HW_DEB_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q 'ok installed' || printf '%s\n' "$p"
	done
}

# hw_apt_install PKG...: install what is missing.  Another process may hold
# the dpkg lock (several engineers share a machine), so retry for a while.
# Return: 0 when everything is installed, 1 otherwise (log in HW_CACHE).
hw_apt_install() {
	local missing=() p i log=$HW_CACHE/apt.log
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" = 0 ] || { echo "not root: cannot apt-get install ${missing[*]}" >"$log"; return 1; }
	command -v apt-get >/dev/null || { echo "no apt-get" >"$log"; return 1; }
	for i in $(seq 1 60); do
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >"$log" 2>&1 && return 0
		if [ "$i" = 1 ] || grep -q 'Unable to locate\|has no installation candidate' "$log"; then
			apt-get update -qq >/dev/null 2>&1 || true
		fi
		sleep 5
	done
	return 1
}
