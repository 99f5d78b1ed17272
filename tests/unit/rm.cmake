# SPDX-License-Identifier: Apache-2.0
# maru-resource-manager unit tests (cmocka).
set(RM_SRC ${PROJECT_SOURCE_DIR}/src/resource_manager)

# The allocator is compiled into its test with the fault-injecting,
# leak-checking allocator hook.
maru_add_unit_test(test_rm_pool
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_pool.c ${RM_SRC}/pool.c
	LIBS maru_common)
target_include_directories(test_rm_pool PRIVATE ${RM_SRC})
target_compile_options(test_rm_pool PRIVATE
	-include ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_alloc_hook.h)

maru_add_unit_test(test_rm_statefmt
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_statefmt.c
	LIBS rm_fmt)

maru_add_unit_test(test_rm_evloop
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_evloop.c
	LIBS maru_common)

maru_add_unit_test(test_rm_core
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_core.c
	LIBS rm_core)

# Every daemon module with the fault-injecting allocator hook, and the
# common file reader they load their state with (its malloc fails too).
maru_add_unit_test(test_rm_faults
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_faults.c
		${RM_SRC}/rm.c ${RM_SRC}/server.c ${RM_SRC}/reaper.c
		${RM_SRC}/holds.c ${RM_SRC}/recovery.c ${RM_SRC}/region.c
		${RM_SRC}/state.c ${RM_SRC}/auth.c ${RM_SRC}/client.c
		${RM_SRC}/idem.c ${RM_SRC}/dev.c
		${RM_SRC}/pool.c ${RM_SRC}/statefmt.c
		${PROJECT_SOURCE_DIR}/src/common/atomicfile.c
	LIBS maru_common PkgConfig::CRYPTO PkgConfig::DAXCTL PkgConfig::ZLIB)
target_include_directories(test_rm_faults PRIVATE ${RM_SRC})
target_compile_options(test_rm_faults PRIVATE
	-include ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_alloc_hook.h)
