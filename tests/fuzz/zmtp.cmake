# SPDX-License-Identifier: Apache-2.0
maru_add_fuzz_target(fuzz_zmtp SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_zmtp.c LIBS maru_common)
