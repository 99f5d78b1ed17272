# SPDX-License-Identifier: Apache-2.0
# maru-client-bench: the C side of the client library's benchmark (owner: libmaru);
# bench/run_client_bench.sh runs it.  Needs hiredis for the Redis column.
pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
if(HIREDIS_FOUND)
	add_executable(maru-client-bench ${CMAKE_CURRENT_SOURCE_DIR}/client_bench.c)
	target_link_libraries(maru-client-bench PRIVATE maru maru_common
		PkgConfig::ZMQ PkgConfig::HIREDIS)
else()
	message(WARNING "hiredis not found: maru-client-bench is not built")
endif()

# shm-index-bench: lookups through the shared index against requests;
# bench/run_shm_index_bench.sh runs it
add_executable(shm-index-bench ${CMAKE_CURRENT_SOURCE_DIR}/shm_index_bench.c)
target_link_libraries(shm-index-bench PRIVATE maru Threads::Threads)
