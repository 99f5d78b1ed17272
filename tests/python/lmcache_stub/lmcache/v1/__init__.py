"""STAND-IN for lmcache.v1 (tests only)."""
