# SPDX-License-Identifier: Apache-2.0
# maru-server benchmarks (engineer "mds"); bench/run_mds_bench.sh runs all.
#   mds-load   load generator (REQ lock-step / DEALER in flight) for
#              LOOKUP/EXISTS/REGISTER/BATCH_LOOKUP, and the bare libzmq
#              ROUTER echo server that is its floor
#   mds-load-pc  mds-load with the server's getpid() cache, for a like-for-
#              like echo floor
#   mds-index  index microbenchmark: lookup cost vs size, insert pauses,
#              bytes per key
add_executable(mds-load ${CMAKE_CURRENT_SOURCE_DIR}/mds_load.c)
target_link_libraries(mds-load PRIVATE maru_common PkgConfig::ZMQ m)
add_executable(mds-index ${CMAKE_CURRENT_SOURCE_DIR}/mds_index.c)
target_link_libraries(mds-index PRIVATE mds_core m)
# mds-load-pc: the same program with the getpid() cache libzmq-era
# maru-server had
# (bench/pidcache.c), used only as the second echo floor so
# that the server can be compared like with like (run_mds_bench.sh)
add_executable(mds-load-pc ${CMAKE_CURRENT_SOURCE_DIR}/mds_load.c
	${CMAKE_CURRENT_SOURCE_DIR}/pidcache.c)
target_link_libraries(mds-load-pc PRIVATE maru_common PkgConfig::ZMQ m)
# msgpack-write: the project's MessagePack writer against msgpack-c's
# packer, on maru-server's batch reply and journal record and on libmaru's
# batch request (docs/architecture.md, "Dependencies")
add_executable(msgpack-write ${CMAKE_CURRENT_SOURCE_DIR}/msgpack_write.c)
target_link_libraries(msgpack-write PRIVATE mds_core PkgConfig::MSGPACK m)
# msgpack-read: the one hand-written MessagePack reader (src/common/msgpk.c)
# against msgpack-c's unpacker, on the server's batch request and on the
# reply libmaru decodes (docs/architecture.md, "Dependencies")
add_executable(msgpack-read ${CMAKE_CURRENT_SOURCE_DIR}/msgpack_read.c)
target_link_libraries(msgpack-read PRIVATE mds_core maru_internal
	PkgConfig::MSGPACK m)
# mds-evict: what eviction costs the server: bytes/key of the
# LRU, register and lookup with and without it, CPU per eviction
add_executable(mds-evict ${CMAKE_CURRENT_SOURCE_DIR}/mds_evict.c)
target_link_libraries(mds-evict PRIVATE mds_core m)
# journal-rival: maru-server's journal against LMDB on the same work, for
# the choice of a format of our own (docs/architecture.md, "Dependencies")
pkg_check_modules(LMDB IMPORTED_TARGET lmdb)
if(LMDB_FOUND)
	add_executable(journal-rival ${CMAKE_CURRENT_SOURCE_DIR}/journal_rival.c)
	target_link_libraries(journal-rival PRIVATE mds_core PkgConfig::LMDB m)
endif()
