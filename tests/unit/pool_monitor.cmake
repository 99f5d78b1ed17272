# SPDX-License-Identifier: Apache-2.0
# pool_monitor: output format (render.c) and the STATS query (stats.c)
maru_add_unit_test(test_pool_monitor
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_pool_monitor.c
	LIBS pool_monitor_core Threads::Threads)
