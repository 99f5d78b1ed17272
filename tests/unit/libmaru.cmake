# SPDX-License-Identifier: Apache-2.0
# libmaru unit tests (owner: libmaru).
#  - test_libmaru_alloc: page allocator, owned-region manager, key map; the
#    library sources are compiled in with a fault-injecting allocator
#  - test_libmaru_codec: request encoders, reply decoders, config
#  - test_libmaru_header: the public header compiles alone (C and C++ style)
#  - test_libmaru_connect: connect's failures name their cause
#  - libmaru_layers: the library's files call one way only (the order of
#    docs/threads.md, "Dependencies"), read from the objects' symbols
set(LIBMARU_SRC ${PROJECT_SOURCE_DIR}/src/libmaru)

maru_add_unit_test(test_libmaru_alloc
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_alloc.c
		${LIBMARU_SRC}/alloc.c ${LIBMARU_SRC}/keymap.c
	LIBS maru_common)
target_include_directories(test_libmaru_alloc PRIVATE ${LIBMARU_SRC}
	${PROJECT_SOURCE_DIR}/include)
set_source_files_properties(${LIBMARU_SRC}/alloc.c ${LIBMARU_SRC}/keymap.c
	TARGET_DIRECTORY test_libmaru_alloc
	PROPERTIES COMPILE_OPTIONS
	"-include;${CMAKE_CURRENT_SOURCE_DIR}/unit/libmaru_testalloc.h")

maru_add_unit_test(test_libmaru_codec
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_codec.c
	LIBS maru_internal)

maru_add_unit_test(test_libmaru_header
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_header.c
	LIBS maru)

# test_libmaru_connect: connect failures and maru_handler_connect_error()
# against real sockets (refused, an HTTP peer, a silent one); public API
maru_add_unit_test(test_libmaru_connect
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_connect.c
	LIBS maru Threads::Threads)

# test_libmaru_e2e: scenario driver for tests/python/test_libmaru_e2e.py
# (needs the real daemons, so it is not registered with ctest)
add_executable(test_libmaru_e2e
	${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_e2e.c)
target_link_libraries(test_libmaru_e2e PRIVATE maru maru_common
	Threads::Threads)

# test_libmaru_rpc: driver of rpc.c for tests/python/test_libmaru_rpc.py,
# which plays the server (pyzmq ROUTER, hand-written TCP peers); not a
# ctest unit
add_executable(test_libmaru_rpc
	${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_rpc.c)
target_link_libraries(test_libmaru_rpc PRIVATE maru_internal Threads::Threads)

add_test(NAME libmaru_layers
	COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/unit/libmaru_layers.sh
		$<TARGET_FILE:maru_internal>)
set_tests_properties(libmaru_layers PROPERTIES LABELS unit TIMEOUT 60)
