# SPDX-License-Identifier: Apache-2.0
"""Package logging: one stream handler per maru package, level from the env.

Each top-level package (maru, maru_common, maru_handler, maru_shm, ...) calls
setup_package_logging(<its name>) on first import.  The level comes from
MARU_LOG_LEVEL, else LMCACHE_LOG_LEVEL, else INFO; unknown names fall back to
INFO.  Records are not propagated to the root logger, so an application's
own logging configuration does not print them twice.
"""

import logging
import os

LOG_FORMAT = "[%(asctime)s] maru %(levelname)s: %(message)s (%(filename)s:%(lineno)d:%(name)s)"

_LEVELS = {
    "CRITICAL": logging.CRITICAL,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARNING": logging.WARNING,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
}


def _env_level() -> int:
    raw = os.environ.get("MARU_LOG_LEVEL")
    if raw is None:
        raw = os.environ.get("LMCACHE_LOG_LEVEL")
    if raw is None:
        return logging.INFO
    return _LEVELS.get(raw.strip().upper(), logging.INFO)


def setup_package_logging(package_name: str) -> logging.Logger:
    """Configure the logger named @package_name once and return it.

    A second call for the same package does not add a second handler.
    """
    logger = logging.getLogger(package_name)
    logger.setLevel(_env_level())
    if not any(getattr(h, "_maru_handler", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._maru_handler = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.propagate = False
    return logger
