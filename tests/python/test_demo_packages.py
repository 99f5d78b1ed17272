# SPDX-License-Identifier: Apache-2.0
"""`./dev.sh demo` needs nothing outside DEMO_PACKAGES (dev.sh): the demo's
build (no tests, benchmarks or man pages) and the demo itself run in a
mount namespace where every program, header and pkg-config file of the
test-only packages (TEST_PACKAGES: pandoc, help2man, clang/LLVM, cmocka,
QEMU, Redis, ...) is hidden -- bound over with /dev/null, as if those
packages were not installed.  Base-system packages in that list (util-linux,
procps, iproute2, passwd, git, kmod) stay: a machine without them is not a
Debian machine.  Root (mount namespaces) only; skipped elsewhere."""
import os
import shutil
import subprocess
import tempfile

import pytest

from test_devsh import REPO, package_lists

BASE = {"util-linux", "procps", "iproute2", "passwd", "git", "kmod"}
HIDE_DIRS = ("/usr/bin/", "/usr/sbin/", "/usr/include/",
             "/usr/lib/x86_64-linux-gnu/pkgconfig/", "/usr/share/pkgconfig/",
             "/usr/lib/llvm-14/bin/")


def hidden_files(packages):
    files = set()
    for pkg in packages:
        out = subprocess.run(["dpkg", "-L", pkg], capture_output=True,
                             text=True)
        for f in out.stdout.split("\n"):
            if f.startswith(HIDE_DIRS) and os.path.isfile(f) and \
                    not os.path.islink(f):
                files.add(f)
    return sorted(files)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a mount namespace")
def test_demo_builds_and_runs_with_only_its_packages(tmp_path):
    demo, test = package_lists()
    hide = hidden_files([p for p in test if p not in BASE])
    assert "/usr/bin/pandoc" in hide and "/usr/bin/help2man" in hide
    assert "/usr/include/cmocka.h" in hide and len(hide) > 30
    # (what the demo needs is never hidden)
    keep = set(hidden_files(demo))
    hide = [f for f in hide if f not in keep]
    listing = tmp_path / "hide.txt"
    listing.write_text("\n".join(hide) + "\n")
    build = tmp_path / "build"
    script = f"""
set -eu
while IFS= read -r f; do [ -n "$f" ] && mount --bind /dev/null "$f"; done < {listing}
! command -v pandoc >/dev/null 2>&1 || [ ! -x "$(command -v pandoc)" ]
cmake -S {REPO} -B {build} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMARU_WERROR=ON \\
      -DBUILD_TESTING=OFF -DMARU_BUILD_BENCH=OFF -DMARU_MAN_PAGES=OFF >/dev/null
cmake --build {build} -j2 >/dev/null
BUILD_DIR={build} MARU_DEMO_POOL_SIZE=256M {REPO}/scripts/demo.sh
"""
    p = subprocess.run(["unshare", "--mount", "--propagation", "private",
                        "bash", "-c", script], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert "==> done" in p.stdout
