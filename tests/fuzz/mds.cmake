# maru-server: the request path (decoder + handler + store) on peer bytes.
# The server's sources are compiled into the target itself rather than
# linked from mds_core, so that the libFuzzer build instruments them for
# coverage (-fsanitize=fuzzer applies to the target's own sources only).
set(MDS_SRC ${CMAKE_CURRENT_SOURCE_DIR}/../../src/metadata_server)
maru_add_fuzz_target(fuzz_mds_request
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_mds_request.c
		${MDS_SRC}/index.c ${MDS_SRC}/msgpk.c ${MDS_SRC}/codec.c
		${MDS_SRC}/stats.c ${MDS_SRC}/store.c ${MDS_SRC}/handler.c
	LIBS maru_common PkgConfig::MSGPACK m)
foreach(t fuzz_mds_request_replay fuzz_mds_request)
	if(TARGET ${t})
		target_include_directories(${t} PRIVATE ${MDS_SRC}
			${CMAKE_CURRENT_SOURCE_DIR}/../unit)
	endif()
endforeach()
