"""``aeron-tools`` / ``python -m driver.tools``: the operator's tools for a driver directory.

Subcommands: ``stat`` (AeronStat; live view, ``--once``, ``--json``, ``--serve``),
``errors`` (ErrorStat), ``loss`` (LossStat), ``streams`` (StreamStat with lags),
``log`` (LogInspector), ``driver`` (health check), ``connections`` (end point connections) and
``grafana`` (the exporter's dashboard). Every one reads any driver
directory — ours or Aeron Java's — and reports a directory it cannot read as
one line on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from driver.concurrent.error_log import read_error_log
from driver.concurrent.loss_report import read_loss_report
from driver.tools import connections, exporter, health, logdump, loss, stat, streams
from driver.tools import errors as errors_tool
from driver.tools.common import ToolError, default_directory, open_cnc, open_counters, open_loss_report
from driver.tools.exporter import grafana_dashboard

__all__ = ["build_parser", "main"]

PROG = "aeron-tools"


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-d",
        "--dir",
        type=Path,
        default=None,
        help="driver directory (aeron.dir); default $AERON_DIR or /dev/shm/aeron-<user>, where drivers and end points "
        "that name no directory run",
    )

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect an Aeron media driver directory (ours or Aeron Java 1.15.1's).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("stat", parents=[common], help="counters: live view, --once, --json, --serve (AeronStat)")
    p.add_argument("--type", action="append", metavar="ID|NAME", help="only this counter type (repeatable)")
    p.add_argument("--label", metavar="REGEX", help="only counters whose label matches")
    p.add_argument("--channel", metavar="REGEX", help="only stream/channel counters whose channel matches")
    p.add_argument("--session", type=int, metavar="ID", help="only stream counters of this session id")
    p.add_argument("--stream", type=int, metavar="ID", help="only stream counters of this stream id")
    p.add_argument("--interval", type=_positive_float, default=1.0, metavar="SECONDS", help="refresh interval (1)")
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N refreshes")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="print once and exit (default when not a terminal)")
    mode.add_argument("--json", action="store_true", help="print JSON and exit (with --count: one per refresh)")
    mode.add_argument("--serve", metavar="HOST:PORT", help="serve the counters for Prometheus (OpenMetrics)")
    p.add_argument(
        "--format",
        choices=["table", "aeronstat"],
        default="table",
        help="text layout: a table with types, or Java AeronStat's lines",
    )
    p.add_argument("--timeout-ms", type=_positive_int, default=health.DEFAULT_DRIVER_TIMEOUT_MS, help=argparse.SUPPRESS)

    p = sub.add_parser("errors", parents=[common], help="the distinct error log (ErrorStat)")
    p.add_argument("--since-ms", type=int, default=0, metavar="EPOCH_MS", help="only errors last seen at or after")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("loss", parents=[common], help="the loss report (LossStat)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("streams", parents=[common], help="positions and lags per stream (StreamStat)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--format", choices=["table", "streamstat"], default="table", help="text layout: ours or Java StreamStat's"
    )

    p = sub.add_parser(
        "log", parents=[common], help="dump a .logbuffer file, or list those under a directory (LogInspector)"
    )
    p.add_argument(
        "path", type=Path, nargs="?", help="a .logbuffer file, or a directory to list its log files (default: --dir)"
    )
    p.add_argument("--partition", type=int, choices=[0, 1, 2], action="append", help="only this term (repeatable)")
    p.add_argument("--frames", type=_positive_int, metavar="N", help="at most N frames per term")
    p.add_argument(
        "--hexdump",
        nargs="?",
        type=_positive_int,
        const=256,
        default=None,
        metavar="BYTES",
        help="hexdump each data frame's payload (first BYTES, default 256)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (no payloads)")

    p = sub.add_parser("driver", parents=[common], help="is a driver alive here? exit 0 if so, 1 if not")
    p.add_argument(
        "--timeout-ms",
        type=_positive_int,
        default=health.DEFAULT_DRIVER_TIMEOUT_MS,
        help="heartbeat age beyond which the driver counts as dead (10000, as aeron.driver.timeout)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing; just the exit status")

    p = sub.add_parser(
        "connections", parents=[common], help="end point connections: RTT, rates, back pressure, age (live view)"
    )
    p.add_argument("--interval", type=_positive_float, default=1.0, metavar="SECONDS", help="refresh interval (1)")
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N refreshes (live view)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="print once and exit (default when not a terminal)")
    mode.add_argument("--json", action="store_true", help="print JSON and exit")

    p = sub.add_parser("grafana", help="print the Grafana dashboard for the exporter's metrics (import it in Grafana)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="write it to FILE instead of stdout")
    return parser


def _directory(args: argparse.Namespace) -> Path:
    directory: Path | None = args.dir
    return directory if directory is not None else default_directory()


def _run_stat(args: argparse.Namespace, out: TextIO) -> int:
    directory = _directory(args)
    counter_filter = stat.build_filter(args.type, args.label, args.channel, args.session, args.stream)
    source = stat.CounterSource(directory, counter_filter)
    try:
        if args.serve:
            address = exporter.parse_address(args.serve)

            def announce(line: str) -> None:
                out.write(line + "\n")
                out.flush()

            return exporter.serve(source, address, args.timeout_ms, announce)
        live = not (args.once or args.json) and out.isatty()
        if live:
            return stat.run_live(source, args.interval, args.count, out)
        count = args.count or 1
        fmt = "json" if args.json else args.format
        return stat.print_snapshots(source, fmt, args.interval, count, out)
    finally:
        source.close()


def _run_errors(args: argparse.Namespace, out: TextIO) -> int:
    with open_cnc(_directory(args)) as cnc:
        observations = read_error_log(cnc.error_log_buffer, args.since_ms)
    out.write(errors_tool.errors_json(observations) if args.json else errors_tool.format_errors(observations))
    return 0


def _run_loss(args: argparse.Namespace, out: TextIO) -> int:
    with open_loss_report(_directory(args)) as report:
        entries = read_loss_report(report.buffer)
    out.write(loss.loss_json(entries) if args.json else loss.format_loss(entries))
    return 0


def _run_streams(args: argparse.Namespace, out: TextIO) -> int:
    with open_cnc(_directory(args)) as cnc:
        found = streams.read_streams(open_counters(cnc), join_spies=args.json or args.format != "streamstat")
    if args.json:
        out.write(streams.streams_json(found))
    elif args.format == "streamstat":
        out.write(streams.format_streamstat(found))
    else:
        out.write(streams.format_streams(found))
    return 0


def _run_log(args: argparse.Namespace, out: TextIO) -> int:
    path: Path = args.path if args.path is not None else _directory(args)
    if path.is_dir():
        out.write(logdump.format_log_listing(path, logdump.find_log_files(path)))
        return 0
    partitions = sorted(set(args.partition)) if args.partition else None
    with logdump.LogFile(path) as log:
        if args.json:
            out.write(logdump.log_json(log, partitions, args.frames))
        else:
            out.write(logdump.format_log(log, partitions, args.frames, args.hexdump))
    return 0


def _run_driver(args: argparse.Namespace, out: TextIO) -> int:
    status = health.check_driver(_directory(args), args.timeout_ms)
    if args.json:
        out.write(health.status_json(status))
    elif not args.quiet:
        out.write(health.format_status(status))
    return 0 if status.alive else 1


def _run_connections(args: argparse.Namespace, out: TextIO) -> int:
    source = stat.CounterSource(_directory(args))
    try:
        if not (args.once or args.json) and out.isatty():
            return connections.run_live(source, args.interval, args.count, out)
        before = connections.read_connections(source)
        time.sleep(args.interval)  # a second reading gives the rates
        after = connections.read_connections(source)
        out.write(
            connections.connections_json(after, before) if args.json else connections.format_connections(after, before)
        )
        return 0
    finally:
        source.close()


def _run_grafana(args: argparse.Namespace, out: TextIO) -> int:
    text = grafana_dashboard()
    if args.output is None:
        out.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    return 0


_COMMANDS = {
    "stat": _run_stat,
    "errors": _run_errors,
    "loss": _run_loss,
    "streams": _run_streams,
    "log": _run_log,
    "driver": _run_driver,
    "connections": _run_connections,
    "grafana": _run_grafana,
}


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one subcommand; returns the exit status (0 ok, 1 unreadable directory or dead driver, 2 usage)."""
    args = build_parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    previous = None
    if args.command == "stat":
        try:
            previous = signal.signal(signal.SIGTERM, _terminate)
        except ValueError:  # not the main thread
            previous = None
    try:
        return _COMMANDS[args.command](args, stream)
    except ToolError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
