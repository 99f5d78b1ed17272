# SPDX-License-Identifier: Apache-2.0
"""Build and install the `maru` Python distribution.

Two ways to find libmaru, for the extension maru_core._maru:

  * a build tree (the dev.sh way), when $MARU_BUILD_DIR is set:

        MARU_BUILD_DIR=<cmake build dir> .venv/bin/pip install \
            --no-build-isolation --no-index --no-deps ./python

    links $MARU_BUILD_DIR/src/libmaru/libmaru.so with the headers of this
    source tree; the library is copied next to the extension and found
    through an $ORIGIN rpath, so the installed package does not depend on
    the build tree afterwards.

  * an installed libmaru (`cmake --install`, the .deb), when $MARU_BUILD_DIR
    is not set: found with `pkg-config libmaru` (PKG_CONFIG_PATH for a
    prefix pkg-config does not search), and linked where it is installed,
    with an rpath to its libdir unless that is a system directory:

        pip install --no-build-isolation --no-index ./python

  When neither is there, <repo>/build is tried as before.

Packages: maru, maru_common, maru_core (the extension, which the other
packages import from there), maru_handler (+ memory), maru_shm,
maru_lmcache, maru_exporter (the maru-exporter command; needs
prometheus_client, Debian's python3-prometheus-client).

When libmaru is not found, the pure-Python parts are installed alone
(with a warning) and MaruHandler raises ImportError; MARU_REQUIRE_EXTENSION=1
makes that an error instead.  MARU_WERROR=1 adds -Werror.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(HERE)
VERSION = "0.1.0"
SYSTEM_LIB_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


def _system_lib_dir(d):
    """A directory the dynamic linker searches anyway (no rpath needed)."""
    d = os.path.realpath(d)
    return d in SYSTEM_LIB_DIRS or (os.path.dirname(d) in ("/lib", "/usr/lib")
                                    and "-linux-" in os.path.basename(d))


def _build_tree(build_dir):
    """libmaru of a CMake build dir, with this tree's headers, or None."""
    lib_dir = os.path.join(os.path.realpath(build_dir), "src", "libmaru")
    include_dir = os.path.join(REPO, "include")
    if not (os.path.exists(os.path.join(include_dir, "maru", "maru.h"))
            and os.path.exists(os.path.join(lib_dir, "libmaru.so"))):
        return None
    return {"where": lib_dir, "include_dirs": [include_dir],
            "library_dirs": [lib_dir], "libraries": ["maru"],
            "runtime_library_dirs": ["$ORIGIN"], "copy_from": lib_dir}


def _pkg_config():
    """An installed libmaru (this version or newer), as `pkg-config libmaru`
    describes it, or None."""
    def ask(*args):
        return subprocess.run(["pkg-config", *args, "libmaru"], check=True,
                              capture_output=True, text=True).stdout.split()

    try:
        ask(f"--atleast-version={VERSION}")
        cflags = ask("--cflags")
        libs = ask("--libs")
        libdir = ask("--variable=libdir")
    except (OSError, subprocess.CalledProcessError):
        return None
    lib_dirs = [f[2:] for f in libs if f.startswith("-L")]
    rpath = [os.path.realpath(d) for d in libdir if not _system_lib_dir(d)]
    return {"where": f"pkg-config ({' '.join(libdir)})",
            "include_dirs": [f[2:] for f in cflags if f.startswith("-I")],
            "extra_compile_args": [f for f in cflags if not f.startswith("-I")],
            "library_dirs": lib_dirs,
            "libraries": [f[2:] for f in libs if f.startswith("-l")],
            "extra_link_args": [f for f in libs if f[:2] not in ("-L", "-l")],
            "runtime_library_dirs": rpath, "copy_from": None}


def _find_libmaru():
    if os.environ.get("MARU_BUILD_DIR"):
        return _build_tree(os.environ["MARU_BUILD_DIR"])
    return _pkg_config() or _build_tree(os.path.join(REPO, "build"))


LIBMARU = _find_libmaru()


class BuildExtCopyingLibmaru(build_ext):
    """build_ext that also copies libmaru.so.* next to the extension (only
    when linking a build tree's libmaru).

    The extension is always rebuilt and earlier copies removed: setuptools'
    build/ may hold the output of an install against another libmaru (a
    build tree's, with its $ORIGIN copy), which its timestamps would reuse."""

    def run(self):
        self.force = True
        dest_dirs = {os.path.dirname(self.get_ext_fullpath(ext.name))
                     for ext in self.extensions}
        for d in dest_dirs:
            for old in glob.glob(os.path.join(d, "libmaru.so*")):
                os.unlink(old)
        super().run()
        if not LIBMARU or not LIBMARU["copy_from"]:
            return
        for dest_dir in dest_dirs:
            os.makedirs(dest_dir, exist_ok=True)
            for src in glob.glob(os.path.join(LIBMARU["copy_from"], "libmaru.so.*")):
                dst = os.path.join(dest_dir, os.path.basename(src))
                shutil.copyfile(os.path.realpath(src), dst)  # resolve symlinks


ext_modules = []
if LIBMARU:
    cflags = ["-std=gnu11", "-Wall", "-Wextra", "-Wshadow", "-Wmissing-prototypes",
              "-Wstrict-prototypes", "-Wformat=2", "-Wno-unused-parameter",
              "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
    if os.environ.get("MARU_WERROR") == "1":
        cflags.append("-Werror")
    print(f"setup.py: libmaru from {LIBMARU['where']}", file=sys.stderr)
    ext_modules.append(Extension(
        "maru_core._maru",
        sources=[os.path.join("src", f) for f in ("_maru.c", "_maru_map.c", "_maru_rm.c")],
        depends=[os.path.join("src", "_maru.h"), os.path.join("src", "_maru_int.h")],
        include_dirs=LIBMARU["include_dirs"],
        library_dirs=LIBMARU["library_dirs"],
        libraries=LIBMARU["libraries"],
        runtime_library_dirs=LIBMARU["runtime_library_dirs"],
        extra_compile_args=cflags + LIBMARU.get("extra_compile_args", []),
        extra_link_args=LIBMARU.get("extra_link_args", []),
    ))
elif os.environ.get("MARU_REQUIRE_EXTENSION") == "1":
    sys.exit("setup.py: libmaru not found (neither $MARU_BUILD_DIR/src/libmaru, "
             "`pkg-config libmaru` nor <repo>/build); build or install it first")
else:
    print("WARNING: libmaru not found (neither $MARU_BUILD_DIR/src/libmaru, "
          "`pkg-config libmaru` nor <repo>/build): installing the pure-Python "
          "parts only (MaruHandler will not work)", file=sys.stderr)

setup(
    name="maru",
    version=VERSION,
    description="Maru: KV-cache storage on CXL shared memory (Python API over libmaru)",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=[
        "maru",
        "maru_common",
        "maru_core",
        "maru_handler",
        "maru_handler.memory",
        "maru_shm",
        "maru_lmcache",
        "maru_exporter",
    ],
    install_requires=["pyzmq>=24", "msgpack>=1.0"],
    extras_require={"lmcache": ["torch"], "exporter": ["prometheus_client"]},
    entry_points={"console_scripts": [
        "maru-exporter = maru_exporter.__main__:main",
    ]},
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExtCopyingLibmaru},
    zip_safe=False,
)
