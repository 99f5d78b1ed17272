# SPDX-License-Identifier: Apache-2.0
# marutop's decoders of maru-server's replies (owner: tools/marutop)
maru_add_fuzz_target(fuzz_marutop_reply
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_marutop_reply.c
	LIBS marutop_core)
