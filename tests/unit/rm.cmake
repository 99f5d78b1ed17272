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
