# SPDX-License-Identifier: Apache-2.0
# MaruPackageConfig.cmake - installs the CMake package of libmaru into
# <libdir>/cmake/maru, so that an installed tree (`cmake --install`, the
# .deb) answers find_package(maru CONFIG) with the imported target
# maru::maru.
#
#   maruTargets.cmake        install(EXPORT) of the export set maruTargets
#                            (src/libmaru: the shared library, its headers)
#   maruConfig.cmake         from maruConfig.cmake.in; relocatable (paths
#                            are computed from the file's own place, so
#                            --prefix and DESTDIR both work)
#   maruConfigVersion.cmake  SameMinorVersion: while the project is 0.x,
#                            a minor bump may change the API
include(CMakePackageConfigHelpers)

set(MARU_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/maru)

install(EXPORT maruTargets
	NAMESPACE maru::
	FILE maruTargets.cmake
	DESTINATION ${MARU_CMAKE_DIR})

configure_package_config_file(
	${CMAKE_CURRENT_LIST_DIR}/maruConfig.cmake.in
	${PROJECT_BINARY_DIR}/maruConfig.cmake
	INSTALL_DESTINATION ${MARU_CMAKE_DIR})
write_basic_package_version_file(
	${PROJECT_BINARY_DIR}/maruConfigVersion.cmake
	VERSION ${PROJECT_VERSION}
	COMPATIBILITY SameMinorVersion)
install(FILES
	${PROJECT_BINARY_DIR}/maruConfig.cmake
	${PROJECT_BINARY_DIR}/maruConfigVersion.cmake
	DESTINATION ${MARU_CMAKE_DIR})
