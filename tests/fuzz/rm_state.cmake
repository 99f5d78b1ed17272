# SPDX-License-Identifier: Apache-2.0
# Fuzz targets of the resource manager's own readers (the wire decoder has
# fuzz_rm_proto in rm_proto.cmake): WAL records, checkpoint files and the
# MARUDEV device header, and holds.meta.  They link only rm_fmt, the pure
# codecs.
# fuzz_rm_server drives the daemon's connection handling (rm_core) with
# whole byte streams over a loopback connection.
maru_add_fuzz_target(fuzz_rm_wal
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_rm_wal.c LIBS rm_fmt)
maru_add_fuzz_target(fuzz_rm_checkpoint
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_rm_checkpoint.c LIBS rm_fmt)
maru_add_fuzz_target(fuzz_rm_devhdr
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_rm_devhdr.c LIBS rm_fmt)
maru_add_fuzz_target(fuzz_rm_server
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_rm_server.c LIBS rm_core)
maru_add_fuzz_target(fuzz_rm_holds
	SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_rm_holds.c LIBS rm_fmt)
