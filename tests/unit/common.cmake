maru_add_unit_test(test_rm_proto SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_proto.c LIBS maru_common)
maru_add_unit_test(test_util SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_util.c LIBS maru_common)
maru_add_unit_test(test_rm_client SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_rm_client.c LIBS maru_common Threads::Threads)
maru_add_unit_test(test_zmtp SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_zmtp.c LIBS maru_common PkgConfig::ZMQ)
