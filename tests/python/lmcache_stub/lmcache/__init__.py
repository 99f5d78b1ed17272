# SPDX-License-Identifier: Apache-2.0
"""STAND-IN for LMCache (tests only): see tests/python/lmcache_stub/README.md."""
IS_MARU_TEST_STUB = True
