# SPDX-License-Identifier: Apache-2.0
# MaruCPack.cmake - the Debian package, built from a configured and built
# tree with
#
#   cpack -G DEB                 (in the build dir; -B DIR to put it elsewhere)
#
# One package, "maru", holds everything `cmake --install` installs, under
# /usr: the daemons and tools (bin/), libmaru.so.0 with its headers,
# libmaru.pc and the CMake package (lib/cmake/maru), the example sources
# (share/doc/maru/examples), the man pages, and whatever systemd/ installs
# (units under lib/systemd/system, sysusers.d, udev rules).
#
# Decisions:
#  - CPACK_SET_DESTDIR: the install runs with CMAKE_INSTALL_PREFIX=/usr and
#    DESTDIR=<staging dir>, not with the staging dir as the prefix, so that
#    paths written into installed files at install time (the units'
#    ExecStart=, see systemd/CMakeLists.txt) name /usr/bin and not the
#    staging dir.
#  - Depends: from dpkg-shlibdeps over every ELF file in the package
#    (CPACK_DEBIAN_PACKAGE_SHLIBDEPS); GENERATE_SHLIBS writes a shlibs file
#    for libmaru.so.0, so packages built against it get "Depends: maru
#    (>= <version>)" the same way; cmake/debian/triggers runs ldconfig
#    (CPack writes that only when the package has no postinst of its own).
#  - Maintainer scripts (cmake/debian): postinst creates the system user
#    from the shipped sysusers.d file and reloads systemd and udev; prerm
#    stops the daemons on removal; postrm reloads systemd.  No unit is
#    enabled or started by the package: the operator does that
#    (docs/operations.md).
#  - Stripped binaries (CPACK_STRIP_FILES), as Debian ships them.
#  - Maintainer: the address the project's commits come from (override
#    with -DMARU_PACKAGE_MAINTAINER=... for a package of your own build).
#  - The license: cmake/debian/copyright (installed by docs/CMakeLists.txt
#    in /usr/share/doc/maru, where Debian looks for it); the man pages are
#    gzip-compressed (docs/man/CMakeLists.txt).
set(MARU_PACKAGE_MAINTAINER
	"Maru maintainers <maintainers@users.noreply.a-seed-14fca37e.example>"
	CACHE STRING "Maintainer field of the Debian package")

set(CPACK_PACKAGE_NAME maru)
set(CPACK_PACKAGE_VENDOR "Maru")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
	"KV-cache store for LLM inference on CXL shared memory")
set(CPACK_PACKAGE_DESCRIPTION
"Maru lets many LLM inference workers share one CXL (or device-DAX,
FS-DAX or emulated) memory pool: a worker writes a KV chunk in place and
registers a small key record; another worker reads the bytes in place.
This package holds the resource manager and metadata server daemons with
their systemd units, the pool monitor, and the libmaru client library with
its headers, pkg-config file and CMake package.")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/xcena-dev/maru")
set(CPACK_PACKAGE_CONTACT "${MARU_PACKAGE_MAINTAINER}")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)      # the prefix the install runs with
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${MARU_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# tools/maru-events is a Python script: its modules are not ELF files
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-zmq, python3-msgpack")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
	${CMAKE_CURRENT_LIST_DIR}/debian/postinst
	${CMAKE_CURRENT_LIST_DIR}/debian/prerm
	${CMAKE_CURRENT_LIST_DIR}/debian/postrm
	${CMAKE_CURRENT_LIST_DIR}/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
