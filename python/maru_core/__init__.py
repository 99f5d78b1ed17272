# SPDX-License-Identifier: Apache-2.0
"""maru_core: the CPython extension over libmaru, in one place.

The extension `maru_core._maru` (source python/src/_maru.c) is the only way
into libmaru: maru_handler builds its Handler on it, maru_shm its
resource-manager client and device scanner, maru_exporter its RM probe.
This package imports no other maru package, so every path to the extension
goes one way, and none needs a lazy import to break a loop:

    maru -> maru_handler -> maru_shm -> maru_core
            maru_handler -----------> maru_core
            maru_exporter ----------> maru_core

An install made without libmaru has no extension.  Importing this package
still works then (the pure-Python parts of the others stay usable); lib()
raises ImportError saying how to get it.
"""

try:
    from . import _maru
except ImportError as _e:  # libmaru was not built when the package was installed
    _maru = None
    _import_error: ImportError | None = _e
else:
    _import_error = None


def lib():
    """The extension module; ImportError when the install has none."""
    if _maru is None:
        raise ImportError(
            "maru_core._maru is not available: libmaru was not built when "
            f"the package was installed ({_import_error}); build it and "
            "reinstall (./dev.sh setup)"
        )
    return _maru


__all__ = ["lib"]
