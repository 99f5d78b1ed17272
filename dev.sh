#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dev.sh - set up a Debian/Ubuntu machine for Maru, then run something.
#
#   ./dev.sh deps    only install the Debian packages (repairing an
#                    interrupted dpkg first); stops, naming them, when
#                    some are still missing
#   ./dev.sh setup   install Debian packages, build, create .venv with the
#                    Python package (no network beyond apt)
#   ./dev.sh demo    setup of what the demo needs (its packages only, a
#                    build without tests and man pages), then the main
#                    job: both daemons on an emulated pool and two
#                    processes sharing a KV chunk
#   ./dev.sh test    setup, then every test: C units (ctest, plain and
#                    ASan/UBSan), bounded fuzzing, Python end-to-end tests,
#                    and the QEMU device-DAX tests
#
# Environment: BUILD_DIR (default build), MARU_SKIP_APT=1 (trust that the
# packages are there), MARU_SKIP_HW=1 (skip the QEMU tests),
# MARU_SYSTEMD_BOOT=0 (skip booting systemd in namespaces for the units'
# test), FUZZ_SECONDS (default 20 per target).
set -euo pipefail
cd "$(dirname "$0")"
TOP=$PWD
BUILD_DIR=${BUILD_DIR:-$TOP/build}
VENV=$TOP/.venv
JOBS=$(nproc)

# What the build and the demo need, from Debian (./dev.sh demo installs
# only these: the demo builds without man pages, tests and benchmarks).
DEMO_PACKAGES=(
	build-essential cmake pkg-config
	libzmq3-dev libmsgpack-dev libdaxctl-dev
	libssl-dev libsodium-dev zlib1g-dev libisal-dev libncurses-dev libsystemd-dev
	libucx-dev
	python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel
	python3-msgpack
)
# ... and what the tests and the benchmarks add (./dev.sh test, deps).
TEST_PACKAGES=(
	git libcmocka-dev
	clang libclang-rt-14-dev llvm clang-format
	python3-pytest python3-numpy python3-torch python3-zmq
	tmux redis-server libhiredis-dev liblmdb-dev ndctl daxctl util-linux procps
	iproute2 passwd ucx-utils
	qemu-system-x86 busybox-static cpio kmod
	python3-matplotlib python3-seccomp python3-prometheus-client python3-redis
	help2man pandoc groff-base
)
DEB_PACKAGES=("${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}")

say() { printf '\n==> %s\n' "$*"; }

# Stop set-up here, whatever called it: a plain `exit`, because bash ignores
# `set -e` inside a function called from `setup && ...`.
die() {
	printf 'dev.sh: %s\n' "$*" >&2
	exit 1
}

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# apt's and dpkg's words for "another apt/dpkg holds the lock"
LOCK_RE='could not get lock|unable to acquire the dpkg frontend lock'
LOCK_RE+='|unable to lock|lock was locked by another process'
LOCK_RE+='|is another process using it'

# Run "$@" as root.  While it fails because another apt or dpkg (an
# unattended upgrade on a fresh cloud image) holds the lock, wait 5 s and
# run it again, up to MARU_LOCK_TRIES (60) times; any other failure returns
# at once.  Its error output is shown once, at the end.
root_with_lock_wait() {
	local err rc i tries=${MARU_LOCK_TRIES:-60}
	err=$(mktemp)
	for ((i = 1; ; i++)); do
		rc=0
		as_root env DEBIAN_FRONTEND=noninteractive "$@" 2>"$err" || rc=$?
		if [ $rc = 0 ] || [ $i -ge "$tries" ] ||
			! grep -qiE "$LOCK_RE" "$err"; then
			break
		fi
		[ $i = 1 ] && say "another apt/dpkg holds its lock; waiting" \
			"(up to $((tries * 5)) s)"
		sleep 5
	done
	cat "$err" >&2
	rm -f "$err"
	return $rc
}

# The DEB_PACKAGES dpkg does not list as installed, one a line.
missing_packages() {
	local p
	for p in "${DEB_PACKAGES[@]}"; do
		case "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" in
		*" ok installed") ;;
		*) printf '%s\n' "$p" ;;
		esac
	done
}

# Install what is missing of DEB_PACKAGES (the demo: DEMO_PACKAGES), or
# stop set-up naming what still is.  Nothing missing needs no root.
install_packages() {
	local missing=() still=()
	[ "${MARU_SKIP_APT:-0}" = 1 ] && return 0
	command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
		die "no dpkg/apt-get: install the packages listed in DEB_PACKAGES" \
			"of dev.sh yourself, then run with MARU_SKIP_APT=1"
	local can_root=1
	[ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null && can_root=0
	# A fresh machine may carry an interrupted dpkg run (half-configured
	# packages): finish it first, or stop, never build on top of it.
	if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
		[ $can_root = 1 ] ||
			die "dpkg reports an interrupted run and this is not root" \
				"(no sudo): run 'dpkg --configure -a' as root, then" \
				"dev.sh again"
		say "dpkg reports an interrupted run: dpkg --configure -a"
		root_with_lock_wait dpkg --configure -a || true
		[ -z "$(dpkg --audit 2>/dev/null)" ] ||
			die "dpkg is still in an interrupted state after" \
				"'dpkg --configure -a' (see 'dpkg --audit'); repair" \
				"it, then run dev.sh again"
	fi
	mapfile -t missing < <(missing_packages)
	[ ${#missing[@]} -eq 0 ] && return 0
	[ $can_root = 1 ] ||
		die "not root and no sudo, and these Debian packages are" \
			"missing: ${missing[*]}; install them as root (apt-get" \
			"install ...), then run dev.sh again"
	say "installing Debian packages: ${missing[*]}"
	if ! root_with_lock_wait apt-get install -y -q \
		--no-install-recommends "${missing[@]}"; then
		# the package lists of a fresh machine may be empty or stale
		say "apt-get install failed; updating the package lists and" \
			"trying once more"
		root_with_lock_wait apt-get update -q || true
		root_with_lock_wait apt-get install -y -q \
			--no-install-recommends "${missing[@]}" || true
	fi
	# apt's exit status is not the whole truth: ask dpkg again
	mapfile -t still < <(missing_packages)
	[ ${#still[@]} -eq 0 ] ||
		die "set-up stopped: Debian packages still not installed:" \
			"${still[*]} (apt-get's message is above); install them," \
			"then run dev.sh again"
}

# The build: everything (tests, benchmarks, man pages) unless BUILD_PARTS
# is "demo" (the daemons, tools, libmaru: what DEMO_PACKAGES can build)
build() {
	local parts=(-DBUILD_TESTING=ON -DMARU_BUILD_BENCH=ON -DMARU_MAN_PAGES=ON)
	[ "${BUILD_PARTS:-all}" = demo ] &&
		parts=(-DBUILD_TESTING=OFF -DMARU_BUILD_BENCH=OFF -DMARU_MAN_PAGES=OFF)
	say "building in $BUILD_DIR"
	cmake -S "$TOP" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DMARU_WERROR=ON "${parts[@]}" >/dev/null || return 1
	cmake --build "$BUILD_DIR" -j"$JOBS"
}

setup_venv() {
	if [ ! -x "$VENV/bin/python" ]; then
		say "creating $VENV"
		/usr/bin/python3 -m venv --system-site-packages "$VENV" ||
			return 1
	fi
	if [ -f "$TOP/python/setup.py" ] || [ -f "$TOP/python/pyproject.toml" ]; then
		say "installing the maru Python package into $VENV"
		# setuptools' build dir would carry modules removed since
		rm -rf "$TOP/python/build"
		MARU_BUILD_DIR=$BUILD_DIR "$VENV/bin/pip" install -q \
			--no-build-isolation --no-index --no-deps "$TOP/python"
	fi
}

# Each step stops set-up on failure (die exits), so no caller can carry on.
setup() {
	install_packages
	build || die "set-up stopped: the build failed (see above)"
	setup_venv || die "set-up stopped: creating $VENV failed (see above)"
}

# Every C file as .clang-format says (clang-format of Debian 12); the
# files that differ are named, with the command that formats them.
check_format() {
	local f bad=()

	command -v clang-format >/dev/null ||
		die "clang-format is missing (Debian package clang-format)"
	while IFS= read -r f; do
		clang-format --dry-run --Werror "$f" >/dev/null 2>&1 ||
			bad+=("$f")
	done < <(cd "$TOP" && find src include tests tools bench examples \
		python/src -name '*.[ch]' -not -path '*/corpus/*' | sort)
	if [ ${#bad[@]} -gt 0 ]; then
		echo "not formatted as .clang-format says (${#bad[@]} file(s)):"
		printf '  %s\n' "${bad[@]}"
		echo "format them: (cd $TOP && clang-format -i FILE...)"
		return 1
	fi
	echo "every C file is formatted"
}

run_ctest() {
	local dir=$1
	(cd "$dir" && ctest --output-on-failure -j"$JOBS")
}

test_all() {
	local rc=0
	export MARU_BUILD_DIR=$BUILD_DIR

	say "C format (.clang-format)"
	(cd "$TOP" && check_format) || rc=1

	say "C unit tests and fuzz corpus replay (ctest)"
	run_ctest "$BUILD_DIR" || rc=1

	say "the same under ASan+UBSan (build-asan)"
	cmake -S "$TOP" -B "$TOP/build-asan" -DMARU_WERROR=ON \
		-DMARU_SANITIZE=address,undefined -DMARU_BUILD_BENCH=OFF >/dev/null
	cmake --build "$TOP/build-asan" -j"$JOBS" >/dev/null
	run_ctest "$TOP/build-asan" || rc=1

	say "bounded fuzzing (libFuzzer, ${FUZZ_SECONDS:-20}s per target)"
	CC=clang cmake -S "$TOP" -B "$TOP/build-fuzz" -DMARU_FUZZ=ON \
		-DMARU_SANITIZE=address,undefined -DMARU_BUILD_BENCH=OFF >/dev/null
	FUZZ_SECONDS=${FUZZ_SECONDS:-20} cmake --build "$TOP/build-fuzz" \
		-j"$JOBS" --target fuzz || rc=1

	say "Python end-to-end tests (pytest)"
	if ls "$TOP"/tests/python/test_*.py >/dev/null 2>&1; then
		"$VENV/bin/python" -m pytest -q -p no:cacheprovider \
			"$TOP/tests/python" || rc=1
	else
		echo "no Python tests yet"
	fi

	if [ "${MARU_SKIP_HW:-0}" != 1 ] && [ -x "$TOP/tests/hw/run.sh" ]; then
		say "device-DAX tests in QEMU guests"
		"$TOP/tests/hw/run.sh" || rc=1
	fi

	if [ $rc = 0 ]; then say "ALL TESTS PASSED"; else say "SOME TESTS FAILED"; fi
	return $rc
}

case "${1:-}" in
deps) install_packages ;;
setup) setup ;;
demo)
	DEB_PACKAGES=("${DEMO_PACKAGES[@]}")
	BUILD_PARTS=demo
	setup
	exec "$TOP/scripts/demo.sh"
	;;
test)
	setup
	test_all
	;;
*)
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
