# SPDX-License-Identifier: Apache-2.0
# the shared index's reader on areas a writer made and someone scribbled on
maru_add_fuzz_target(fuzz_shmidx SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_shmidx.c LIBS maru_common)
