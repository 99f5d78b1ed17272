# SPDX-License-Identifier: Apache-2.0
# libmaru's decoders of network/device bytes (owner: libmaru)
maru_add_fuzz_target(fuzz_libmaru_codec
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_libmaru_codec.c
	LIBS maru_internal)
