# SPDX-License-Identifier: Apache-2.0
maru_add_fuzz_target(fuzz_zcurve SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_zcurve.c LIBS maru_common)
