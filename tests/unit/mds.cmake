# SPDX-License-Identifier: Apache-2.0
# maru-server unit tests (engineer "mds")
maru_add_unit_test(test_mds_index SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_mds_index.c LIBS mds_core)
maru_add_unit_test(test_mds_codec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_mds_codec.c LIBS mds_core PkgConfig::MSGPACK)
maru_add_unit_test(test_pubidx SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_pubidx.c LIBS mds_core)
maru_add_unit_test(test_mds_store SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_mds_store.c LIBS mds_core PkgConfig::MSGPACK)
maru_add_unit_test(test_mds_journal SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_mds_journal.c LIBS mds_core PkgConfig::MSGPACK PkgConfig::ZLIB)
maru_add_unit_test(test_mds_events SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_mds_events.c LIBS mds_core PkgConfig::MSGPACK PkgConfig::ZMQ)
