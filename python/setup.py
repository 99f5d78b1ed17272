# SPDX-License-Identifier: Apache-2.0
"""Build and install the `maru` Python distribution.

Installs offline into a venv (the dev.sh way):

    MARU_BUILD_DIR=<cmake build dir> .venv/bin/pip install \
        --no-build-isolation --no-index --no-deps ./python

Packages: maru, maru_common, maru_handler (+ memory), maru_shm,
maru_lmcache.  The extension maru_handler._maru links libmaru from
$MARU_BUILD_DIR/src/libmaru (default: <repo>/build); the library is copied
next to the extension and found through an $ORIGIN rpath, so the installed
package does not depend on the build tree afterwards.

When libmaru is not built yet, the pure-Python parts are installed alone
(with a warning) and MaruHandler raises ImportError; MARU_REQUIRE_EXTENSION=1
makes that an error instead.  MARU_WERROR=1 adds -Werror.
"""

import glob
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(HERE)
BUILD_DIR = os.path.realpath(os.environ.get("MARU_BUILD_DIR") or os.path.join(REPO, "build"))
LIB_DIR = os.path.join(BUILD_DIR, "src", "libmaru")
INCLUDE_DIR = os.path.join(REPO, "include")


def _have_libmaru() -> bool:
    return (os.path.exists(os.path.join(INCLUDE_DIR, "maru", "maru.h"))
            and os.path.exists(os.path.join(LIB_DIR, "libmaru.so")))


class BuildExtCopyingLibmaru(build_ext):
    """build_ext that also copies libmaru.so.* next to the extension."""

    def run(self):
        super().run()
        for ext in self.extensions:
            dest_dir = os.path.dirname(self.get_ext_fullpath(ext.name))
            os.makedirs(dest_dir, exist_ok=True)
            for src in glob.glob(os.path.join(LIB_DIR, "libmaru.so.*")):
                dst = os.path.join(dest_dir, os.path.basename(src))
                shutil.copyfile(os.path.realpath(src), dst)  # resolve symlinks


ext_modules = []
if _have_libmaru():
    cflags = ["-std=gnu11", "-Wall", "-Wextra", "-Wshadow", "-Wmissing-prototypes",
              "-Wstrict-prototypes", "-Wformat=2", "-Wno-unused-parameter",
              "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
    if os.environ.get("MARU_WERROR") == "1":
        cflags.append("-Werror")
    ext_modules.append(Extension(
        "maru_handler._maru",
        sources=[os.path.join("src", "_maru.c")],
        include_dirs=[INCLUDE_DIR],
        library_dirs=[LIB_DIR],
        libraries=["maru"],
        runtime_library_dirs=["$ORIGIN"],
        extra_compile_args=cflags,
    ))
elif os.environ.get("MARU_REQUIRE_EXTENSION") == "1":
    sys.exit(f"setup.py: libmaru not found ({LIB_DIR}/libmaru.so, "
             f"{INCLUDE_DIR}/maru/maru.h); build it first or set MARU_BUILD_DIR")
else:
    print(f"WARNING: libmaru not found under {LIB_DIR}: installing the pure-Python "
          "parts only (MaruHandler will not work)", file=sys.stderr)

setup(
    name="maru",
    version="0.1.0",
    description="Maru: KV-cache storage on CXL shared memory (Python API over libmaru)",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=[
        "maru",
        "maru_common",
        "maru_handler",
        "maru_handler.memory",
        "maru_shm",
        "maru_lmcache",
    ],
    install_requires=["pyzmq>=24", "msgpack>=1.0"],
    extras_require={"lmcache": ["torch"]},
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExtCopyingLibmaru},
    zip_safe=False,
)
