# maru-server unit tests (engineer "mds")
maru_add_unit_test(test_mds_index SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_mds_index.c LIBS mds_core)
