# SPDX-License-Identifier: Apache-2.0
"""STAND-IN for lmcache.logging (tests only)."""
import logging


def init_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
