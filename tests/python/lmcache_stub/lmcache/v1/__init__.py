# SPDX-License-Identifier: Apache-2.0
"""STAND-IN for lmcache.v1 (tests only)."""
