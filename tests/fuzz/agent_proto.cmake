# SPDX-License-Identifier: Apache-2.0
maru_add_fuzz_target(fuzz_agent_proto SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_agent_proto.c LIBS maru_common)
