# maru-server benchmarks (engineer "mds"); bench/run_mds_bench.sh runs all.
#   mds-load   load generator (REQ lock-step / DEALER in flight) for
#              LOOKUP/EXISTS/REGISTER/BATCH_LOOKUP, and the bare libzmq
#              ROUTER echo server that is its floor
#   mds-index  index microbenchmark: lookup cost vs size, insert pauses,
#              bytes per key
add_executable(mds-load ${CMAKE_CURRENT_SOURCE_DIR}/mds_load.c)
target_link_libraries(mds-load PRIVATE maru_common PkgConfig::ZMQ m)
add_executable(mds-index ${CMAKE_CURRENT_SOURCE_DIR}/mds_index.c)
target_link_libraries(mds-index PRIVATE mds_core m)
