# SPDX-License-Identifier: Apache-2.0
# maru-server: the request path (decoder + handler + store) on peer bytes.
# The server's sources are compiled into the target itself rather than
# linked from mds_core, so that the libFuzzer build instruments them for
# coverage (-fsanitize=fuzzer applies to the target's own sources only).
set(MDS_SRC ${CMAKE_CURRENT_SOURCE_DIR}/../../src/metadata_server)
# the store (every target below): mds_core's sources but the handler, the
# loop and the RM session
set(MDS_STORE_SRC
	${MDS_SRC}/index.c ${MDS_SRC}/policy.c ${MDS_SRC}/codec.c
	${MDS_SRC}/stats.c ${MDS_SRC}/journal.c ${MDS_SRC}/store.c
	${MDS_SRC}/owners.c ${MDS_SRC}/regions.c ${MDS_SRC}/kv.c
	${MDS_SRC}/evict.c ${MDS_SRC}/pages.c ${MDS_SRC}/retire.c
	${MDS_SRC}/recovery.c ${MDS_SRC}/events.c ${MDS_SRC}/pubidx.c)
maru_add_fuzz_target(fuzz_mds_request
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_mds_request.c
		${MDS_STORE_SRC}
		${MDS_SRC}/handler.c
	LIBS maru_common PkgConfig::MSGPACK PkgConfig::ISAL PkgConfig::ZMQ m)
foreach(t fuzz_mds_request_replay fuzz_mds_request)
	if(TARGET ${t})
		target_include_directories(${t} PRIVATE ${MDS_SRC}
			${CMAKE_CURRENT_SOURCE_DIR}/../unit)
	endif()
endforeach()

# maru-server: one connection's byte stream through the loop's own
# per-connection code (server_feed(): greeting, READY, frames, envelopes,
# look-ahead, handler), with the same sources compiled in for coverage.
maru_add_fuzz_target(fuzz_mds_conn
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_mds_conn.c
		${MDS_STORE_SRC}
		${MDS_SRC}/handler.c ${MDS_SRC}/server.c ${MDS_SRC}/accept.c
		${MDS_SRC}/rmsess.c
	LIBS maru_common maru_daemon PkgConfig::MSGPACK PkgConfig::ISAL
		PkgConfig::ZMQ m)
foreach(t fuzz_mds_conn_replay fuzz_mds_conn)
	if(TARGET ${t})
		target_include_directories(${t} PRIVATE ${MDS_SRC}
			${CMAKE_CURRENT_SOURCE_DIR}/../unit)
	endif()
endforeach()

# maru-server: its journal read back -- frames (jr_next),
# records (jr_decode) and their replay into a store (mds_apply), as a
# restart does after a crash left anything at all in the state directory.
maru_add_fuzz_target(fuzz_mds_journal
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_mds_journal.c
		${MDS_STORE_SRC}
	LIBS maru_common PkgConfig::ISAL PkgConfig::ZMQ m)
foreach(t fuzz_mds_journal_replay fuzz_mds_journal)
	if(TARGET ${t})
		target_include_directories(${t} PRIVATE ${MDS_SRC})
	endif()
endforeach()
