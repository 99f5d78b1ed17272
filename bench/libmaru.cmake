# maru-client-bench: the C side of the issue-4 benchmark (owner: libmaru);
# bench/run_client_bench.sh runs it.  Needs hiredis for the Redis column.
pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
if(HIREDIS_FOUND)
	add_executable(maru-client-bench ${CMAKE_CURRENT_SOURCE_DIR}/client_bench.c)
	target_link_libraries(maru-client-bench PRIVATE maru maru_common
		PkgConfig::ZMQ PkgConfig::HIREDIS)
else()
	message(WARNING "hiredis not found: maru-client-bench is not built")
endif()
