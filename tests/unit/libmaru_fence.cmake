# SPDX-License-Identifier: Apache-2.0
# libmaru fencing (engineer "fence"): the mapper's in-place fence and the
# retired list, on a memfd standing in for the shared pool.  The end-to-end
# behaviour (server restart, lease expiry) is tests/python/test_libmaru_fence.py.
maru_add_unit_test(test_libmaru_fence
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_libmaru_fence.c
	LIBS maru_internal)
