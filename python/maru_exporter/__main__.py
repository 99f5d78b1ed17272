# SPDX-License-Identifier: Apache-2.0
"""maru-exporter command line: serve /metrics until SIGTERM/SIGINT.

    maru-exporter [--listen HOST:PORT] [--rm HOST:PORT ...]
                  [--server tcp://HOST:PORT ...] [--agent tcp://HOST:PORT ...]
                  [--agent-curve-key KEY] [--timeout-ms N]

Exit status: 0 after SIGTERM/SIGINT (or --help/--version), 1 when it
cannot serve (address in use, prometheus_client missing), 2 for a usage
error (argparse's convention).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from . import (DEFAULT_LISTEN, DEFAULT_RM, DEFAULT_SERVER, DEFAULT_TIMEOUT_MS,
               VERSION)


def _listen(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    try:
        p = int(port)
    except ValueError:
        p = -1
    if not sep or not 0 < p < 65536:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {s!r}")
    return host.strip("[]") or "0.0.0.0", p


def _url(s: str) -> str:
    if not s.startswith(("tcp://", "ipc://")):
        raise argparse.ArgumentTypeError(f"not tcp://HOST:PORT: {s!r}")
    return s


def _rm(s: str) -> str:
    _listen(s)
    return s


def _agent(s: str) -> str:
    if not s.startswith("tcp://"):
        raise argparse.ArgumentTypeError(f"not tcp://HOST:PORT: {s!r}")
    _listen(s[len("tcp://"):])
    return s


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="maru-exporter",
        description="Serve the Maru daemons' counters and gauges in the "
        "Prometheus text format: every scrape of /metrics polls the resource "
        "manager(s) (STATS), metadata server(s) (GET_STATS, GET_USAGE) and "
        "maru-agent(s) (STATS).")
    p.add_argument("--listen", type=_listen, default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve /metrics (default {DEFAULT_LISTEN})")
    p.add_argument("--rm", type=_rm, action="append", metavar="HOST:PORT",
                   help=f"a resource manager to poll, repeatable (default {DEFAULT_RM}); "
                   "authenticates with $MARU_RM_KEY_FILE like every libmaru client")
    p.add_argument("--server", type=_url, action="append", metavar="URL",
                   help=f"a maru-server to poll, repeatable (default {DEFAULT_SERVER})")
    p.add_argument("--agent", type=_agent, action="append", metavar="URL",
                   help="a maru-agent to poll (its control port), repeatable "
                   "(default none)")
    p.add_argument("--agent-curve-key", metavar="KEY",
                   default=os.environ.get("MARU_AGENT_CURVE_KEY") or None,
                   help="the agents' CURVE public key (40 Z85 characters or "
                   "its .key file; default $MARU_AGENT_CURVE_KEY); our "
                   "certificate is $MARU_CURVE_SECRET_KEY_FILE")
    p.add_argument("--no-rm", action="store_true", help="poll no resource manager")
    p.add_argument("--no-server", action="store_true", help="poll no maru-server")
    p.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="N",
                   help=f"per request to a daemon (default {DEFAULT_TIMEOUT_MS})")
    p.add_argument("--version", action="version", version=f"maru-exporter {VERSION}")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.timeout_ms <= 0:
        parser().error("--timeout-ms must be > 0")
    rms = [] if args.no_rm else (args.rm or [DEFAULT_RM])
    servers = [] if args.no_server else (args.server or [DEFAULT_SERVER])
    agents = args.agent or []
    curve = None
    if agents and args.agent_curve_key:
        secret = os.environ.get("MARU_CURVE_SECRET_KEY_FILE")
        if not secret:
            parser().error("--agent-curve-key needs our certificate in "
                           "$MARU_CURVE_SECRET_KEY_FILE (CURVE needs both)")
        try:
            from . import load_curve
            curve = load_curve(args.agent_curve_key, secret)
        except (OSError, ValueError, ImportError) as e:
            print(f"maru-exporter: agent CURVE keys: {e}", file=sys.stderr)
            return 1
    try:
        from prometheus_client import start_http_server
        from prometheus_client.core import REGISTRY

        from . import MaruCollector
    except ImportError as e:
        print(f"maru-exporter: {e} (install python3-prometheus-client)", file=sys.stderr)
        return 1

    # only our figures: not the exporter process's own (python_gc_*, ...)
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
    for c in (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR):
        REGISTRY.unregister(c)
    REGISTRY.register(MaruCollector(rms, servers, args.timeout_ms, agents=agents,
                                    agent_curve=curve))
    host, port = args.listen
    try:
        start_http_server(port, addr=host)
    except OSError as e:
        print(f"maru-exporter: cannot listen on {host}:{port}: {e.strerror}",
              file=sys.stderr)
        return 1
    print(f"maru-exporter {VERSION}: http://{host}:{port}/metrics, rm {rms or '-'}, "
          f"server {servers or '-'}, agent {agents or '-'}", file=sys.stderr, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
