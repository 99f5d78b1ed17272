#!/usr/bin/env bash
# dev.sh - set up a Debian/Ubuntu machine for Maru, then run something.
#
#   ./dev.sh setup   install Debian packages, build, create .venv with the
#                    Python package (no network beyond apt)
#   ./dev.sh demo    setup, then the main job: both daemons on an emulated
#                    pool and two processes sharing a KV chunk
#   ./dev.sh test    setup, then every test: C units (ctest, plain and
#                    ASan/UBSan), bounded fuzzing, Python end-to-end tests,
#                    and the QEMU device-DAX tests
#
# Environment: BUILD_DIR (default build), MARU_SKIP_APT=1 (trust that the
# packages are there), MARU_SKIP_HW=1 (skip the QEMU tests),
# FUZZ_SECONDS (default 20 per target).
set -euo pipefail
cd "$(dirname "$0")"
TOP=$PWD
BUILD_DIR=${BUILD_DIR:-$TOP/build}
VENV=$TOP/.venv
JOBS=$(nproc)

# Everything the build, the tests and the benchmarks need, from Debian.
DEB_PACKAGES=(
	build-essential cmake pkg-config git
	libzmq3-dev libmsgpack-dev libdaxctl-dev libcmocka-dev
	libssl-dev libsodium-dev zlib1g-dev libisal-dev libncurses-dev libsystemd-dev
	clang libclang-rt-14-dev llvm
	python3 python3-dev python3-venv python3-pip python3-setuptools python3-wheel
	python3-pytest python3-numpy python3-torch python3-zmq python3-msgpack
	tmux redis-server libhiredis-dev liblmdb-dev ndctl daxctl util-linux procps
	qemu-system-x86 busybox-static cpio kmod
	python3-matplotlib python3-seccomp
)

say() { printf '\n==> %s\n' "$*"; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

install_packages() {
	local missing=() p i
	[ "${MARU_SKIP_APT:-0}" = 1 ] && return 0
	# A fresh machine may carry an interrupted dpkg run (half-configured
	# packages): finish it first, or stop, never build on top of it.
	if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
		say "dpkg reports an interrupted run: dpkg --configure -a"
		if ! as_root env DEBIAN_FRONTEND=noninteractive \
			dpkg --configure -a || [ -n "$(dpkg --audit 2>/dev/null)" ]; then
			echo "dev.sh: dpkg is still in an interrupted state after" \
				"'dpkg --configure -a' (see 'dpkg --audit'); repair" \
				"it, then run dev.sh again" >&2
			return 1
		fi
	fi
	for p in "${DEB_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing Debian packages: ${missing[*]}"
	# Another apt may hold the lock on a fresh machine: retry a while.
	for i in $(seq 1 30); do
		if as_root env DEBIAN_FRONTEND=noninteractive apt-get install \
			-y -q --no-install-recommends "${missing[@]}"; then
			return 0
		fi
		[ "$i" = 1 ] && as_root apt-get update -q || true
		sleep 5
	done
	echo "dev.sh: apt-get install failed" >&2
	return 1
}

build() {
	say "building in $BUILD_DIR"
	cmake -S "$TOP" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DMARU_WERROR=ON >/dev/null
	cmake --build "$BUILD_DIR" -j"$JOBS"
}

setup_venv() {
	if [ ! -x "$VENV/bin/python" ]; then
		say "creating $VENV"
		/usr/bin/python3 -m venv --system-site-packages "$VENV"
	fi
	if [ -f "$TOP/python/setup.py" ] || [ -f "$TOP/python/pyproject.toml" ]; then
		say "installing the maru Python package into $VENV"
		# setuptools' build dir would carry modules removed since
		rm -rf "$TOP/python/build"
		MARU_BUILD_DIR=$BUILD_DIR "$VENV/bin/pip" install -q \
			--no-build-isolation --no-index --no-deps "$TOP/python"
	fi
}

setup() {
	install_packages
	build
	setup_venv
}

run_ctest() {
	local dir=$1
	(cd "$dir" && ctest --output-on-failure -j"$JOBS")
}

test_all() {
	local rc=0
	export MARU_BUILD_DIR=$BUILD_DIR

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
setup) setup ;;
demo) setup && exec "$TOP/scripts/demo.sh" ;;
test) setup && test_all ;;
*)
	sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
