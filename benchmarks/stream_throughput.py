"""Bulk bytes over one connection: ours (``conn.send_stream``, IPC and UDP) beside grpcio and plain asyncio sockets.

    python benchmarks/stream_throughput.py [--bytes 1073741824] [--term-length 4194304] [--quick]
                                           [--big-mtu 8192] [--udp-window 1048576] [--peer-crc]
                                           [--only SUBSTRING] [--profile]

Every row is a sender (client) process and a receiver (server) process, spawned;
this process only starts them and prints what they report. The sender streams
``--bytes`` bytes (default 1 GiB; ``--quick`` 32 MiB) drawn again and again from
one 1 MiB block of random bytes, so neither side ever holds the whole stream;
the receiver iterates the chunks and counts them (discarding the data). MB/s is
10^6 bytes per second at the receiver, from the stream's start (ours: the
``on_stream`` listener starting; peers: the first chunk) to its last byte. Peak
memory is each process's ``ru_maxrss`` (``resource.getrusage``, reported by the
process itself at the end): it includes the parts of the shared-memory logs the
process touched, and the interpreter with its imports (about 30-45 MB before
the first byte).

Ours: the client calls ``await conn.send_stream(pieces, size=n)`` with an
iterator of 1 MiB pieces, which packs them into chunks of
``min(stream_chunk_size, max_message_length - 10)`` bytes (max message length
is term length / 8: 512 KiB - 10 with the default 4 MiB terms); the server's
``on_stream`` listener does ``async for chunk in stream``. Both ends set
``ipc_term_length`` and ``term_length`` to ``--term-length``. Our stream always
carries a CRC-32, computed by the sender and checked by the receiver. Over IPC
the client shares the server's Aeron directory (the driver is embedded in the
server process); over UDP each process has its own directory and driver, and
the bytes go over 127.0.0.1 (frames of ``mtu`` = 1,408 bytes). A 512 KiB chunk is
written into the log as frames of at most the publication's MTU, one Python call
each: 1,408 bytes by default, also over IPC. The "+ 8 KiB frames" row sets
``AERON_IPC_MTU_LENGTH=8192`` (``--big-mtu``) for the server's embedded driver,
which creates both IPC logs of the connection: 8 KiB is the most the end point's
own 64 KiB-term handshake logs on that driver accept. Over UDP the sender may run
only a receiver window (Aeron's default 128 KiB) ahead of what the receiver has
acknowledged in a status message; the "+ 1 MiB window" row sets
``AERON_RCV_INITIAL_WINDOW_LENGTH`` (``--udp-window``) in both processes and
``socket_rcvbuf``/``socket_sndbuf`` to 4 MiB so the sockets hold such a burst.

Peers, with the same chunk size: grpcio ``grpc.aio`` client streaming (a generic
``stream_unary`` handler, bytes passed through without serializers) over TCP
127.0.0.1; and, as the floor of what an asyncio program can move, a plain
asyncio stream (``writer.write(chunk)`` + ``await writer.drain()``, the
receiver ``await reader.read(1 MiB)``) over TCP 127.0.0.1 and a unix socket.
``--peer-crc`` makes the peers compute a CRC-32 on both ends as ours does.
``--profile`` runs our sender and receiver under cProfile.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import signal
import sys
import tempfile
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, print_table
from _endpoint_common import (
    children,
    free_tcp_port,
    free_udp_port,
    run_async,
    serve_grpc,
    serve_until_stopped,
    wait_event,
)

from endpoint.streaming import CHUNK_HEADER_LENGTH

RUN_TIMEOUT_S = 900.0
"""Bound on one row (both processes)."""
PIECE = 1 << 20
"""The sender's source yields pieces of this size (ours re-packs them into chunks)."""
STREAM_CHUNK_LIMIT = 1 << 20
"""Our default ``stream_chunk_size``."""
GRPC_SERVICE = "bench.Bulk"
GRPC_METHOD = f"/{GRPC_SERVICE}/Upload"
MB = 1_000_000

OURS_IPC = "ours IPC, send_stream"
OURS_UDP = "ours UDP, send_stream"
BIG_MTU = " + 8 KiB frames"
"""Row suffix: IPC frames of up to ``--big-mtu`` bytes (AERON_IPC_MTU_LENGTH of the server's embedded driver)."""
BIG_WINDOW = " + 1 MiB window"
"""Row suffix: a ``--udp-window`` receiver window (AERON_RCV_INITIAL_WINDOW_LENGTH) and bigger socket buffers."""
UDP_SOCKET_BUFFER = 4 << 20
"""SO_RCVBUF and SO_SNDBUF (``socket_rcvbuf``/``socket_sndbuf``) of the "+ 1 MiB window" row."""
GRPC_TCP = "grpcio aio client streaming, TCP"
TCP_FLOOR = "asyncio stream, TCP 127.0.0.1"
UNIX_FLOOR = "asyncio stream, unix socket"

THROUGHPUT_BAR = 500.0
"""MB/s over IPC."""
MEMORY_BAR = 100.0
"""MB of peak RSS per process."""


def chunk_size_for(term_length: int) -> int:
    """Our chunk size for a connection of ``term_length`` (its max message length is an eighth of a term)."""
    return min(STREAM_CHUNK_LIMIT, term_length // 8 - CHUNK_HEADER_LENGTH)


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def block() -> bytes:
    return os.urandom(PIECE)


def pieces(total: int, size: int) -> Iterator[bytes]:
    """``total`` bytes as ``size``-byte pieces (the last one shorter) of one random block, never all at once."""
    piece = (block() * max(1, -(-size // PIECE)))[:size]
    for _ in range(total // size):
        yield piece  # the same object each time: the source costs nothing
    if total % size:
        yield piece[: total % size]


class Side(NamedTuple):
    """What one process reports."""

    bytes: int
    seconds: float
    peak_rss_mb: float
    crc32: int


class Result(NamedTuple):
    received: Side
    sent: Side
    chunk_size: int

    @property
    def mb_per_s(self) -> float:
        return self.received.bytes / self.received.seconds / MB if self.received.seconds else 0.0


def _collect(out: Any, sent_out: Any) -> tuple[Side, Side]:
    received = out.get(timeout=RUN_TIMEOUT_S)
    if isinstance(received, str):
        raise RuntimeError(received)
    sent = sent_out.get(timeout=60)
    if isinstance(sent, str):
        raise RuntimeError(sent)
    return Side(*received), Side(*sent)


def _check(result: Result, total: int, crc: bool) -> Result:
    if result.received.bytes != total or result.sent.bytes != total:
        raise RuntimeError(f"sent {result.sent.bytes:,} and received {result.received.bytes:,} of {total:,} bytes")
    if crc and result.received.crc32 != result.sent.crc32:
        raise RuntimeError(f"CRC-32 {result.received.crc32:#010x} received, {result.sent.crc32:#010x} sent")
    return result


# -- ours -------------------------------------------------------------------------------------------------------


class Tuning(NamedTuple):
    """Settings of ours beyond the term length; zero keeps the default."""

    ipc_mtu: int = 0
    udp_window: int = 0


def _tune(tuning: Tuning) -> int:
    """Apply ``tuning`` to this process's embedded driver (Aeron settings from the environment).

    Returns the socket buffer size for the configuration (0: the driver's default).
    """
    if tuning.ipc_mtu:
        # IPC logs (the client's too, as the server process hosts the driver) get frames of up to ipc_mtu bytes.
        os.environ["AERON_IPC_MTU_LENGTH"] = str(tuning.ipc_mtu)
    if tuning.udp_window:
        # The receiver lets the sender run this far ahead; the sockets must hold a window's burst.
        os.environ["AERON_RCV_INITIAL_WINDOW_LENGTH"] = str(tuning.udp_window)
        return UDP_SOCKET_BUFFER
    return 0


def endpoint_receiver(
    aeron_dir: str, port: int, term_length: int, tuning: Tuning, ready: Any, stop: Any, out: Any, profile: bool
) -> None:
    """Server process: count the bytes of the first stream."""
    socket_buffer = _tune(tuning)

    async def serve() -> None:
        from endpoint import Connection, Server, ServerConfiguration
        from endpoint.streaming import IncomingStream

        config = ServerConfiguration(
            port=port,
            listen_address="127.0.0.1",
            aeron_dir=aeron_dir,
            term_length=term_length,
            ipc_term_length=term_length,
            socket_rcvbuf=socket_buffer,
            socket_sndbuf=socket_buffer,
        )
        server = Server(config)

        @server.on_stream
        async def receive(conn: Connection, stream: IncomingStream) -> None:
            start = time.perf_counter()
            count = 0
            async for chunk in stream:  # the stream's CRC-32 is checked at its end (StreamChecksumError)
                count += len(chunk)
            out.put((count, time.perf_counter() - start, peak_rss_mb(), 0))

        @server.on_error
        def failed(conn: Connection | None, exc: BaseException) -> None:
            out.put(f"server: {type(exc).__name__}: {exc}")

        await serve_until_stopped(server, ready, stop, out, RUN_TIMEOUT_S + 60)

    run_async(serve, "stream receiver (ours)" if profile else "")


def endpoint_sender(
    aeron_dir: str,
    port: int,
    term_length: int,
    tuning: Tuning,
    total: int,
    udp: bool,
    ready: Any,
    done: Any,
    out: Any,
    profile: bool,
) -> None:
    """Client process: connect, stream ``total`` bytes, wait until told the receiver has them all."""
    socket_buffer = _tune(tuning)

    async def send() -> None:
        from endpoint import Client, ClientConfiguration

        config = ClientConfiguration(
            aeron_dir=aeron_dir,
            prefer_ipc=not udp,
            term_length=term_length,
            ipc_term_length=term_length,
            socket_rcvbuf=socket_buffer,
            socket_sndbuf=socket_buffer,
        )
        try:
            async with Client(config) as client:
                if not await wait_event(ready, 60):
                    raise TimeoutError("the server process did not start")
                conn = await client.connect("127.0.0.1", port)
                if conn.is_ipc == udp:
                    raise RuntimeError(f"connected over {'IPC' if conn.is_ipc else 'UDP'}, not as asked")
                if conn.streams.chunk_size != chunk_size_for(term_length):
                    raise RuntimeError(f"chunk size {conn.streams.chunk_size}, not {chunk_size_for(term_length)}")
                start = time.perf_counter()
                async with asyncio.timeout(RUN_TIMEOUT_S):
                    sent = await conn.send_stream(pieces(total, PIECE), name="bench", size=total)
                out.put((sent, time.perf_counter() - start, peak_rss_mb(), 0))
                await wait_event(done, 120)
                await conn.close("done")
        except Exception as exc:
            out.put(f"client: {type(exc).__name__}: {exc}")
            raise

    run_async(send, "stream sender (ours)" if profile else "")


def run_endpoint(total: int, term_length: int, tuning: Tuning, udp: bool, profile: bool) -> Result:
    with children() as group:
        ctx = group.ctx
        ready, stop, done, out, sent_out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        server_dir = fresh_aeron_dir("stream-srv")
        client_dir = fresh_aeron_dir("stream-cli") if udp else server_dir
        group.dirs += [server_dir, client_dir]
        port = free_udp_port()
        server = group.start(endpoint_receiver, str(server_dir), port, term_length, tuning, ready, stop, out, profile)
        client = group.start(
            endpoint_sender, str(client_dir), port, term_length, tuning, total, udp, ready, done, sent_out, profile
        )
        received, sent = _collect(out, sent_out)
        done.set()
        group.join(client, 15)  # the client leaves first: over IPC it uses the server's driver
        stop.set()
        group.join(server, 15)
    return _check(Result(received, sent, chunk_size_for(term_length)), total, crc=False)


# -- grpcio -----------------------------------------------------------------------------------------------------


def grpc_receiver(address: str, crc: bool, ready: Any, stop: Any, out: Any) -> None:
    import grpc

    async def upload(chunks: AsyncIterator[bytes], context: Any) -> bytes:
        start = 0.0
        count = checksum = 0
        async for chunk in chunks:
            if not count:
                start = time.perf_counter()
            count += len(chunk)
            if crc:
                checksum = zlib.crc32(chunk, checksum)
        out.put((count, time.perf_counter() - start, peak_rss_mb(), checksum))
        return count.to_bytes(8, "little")

    method = grpc.stream_unary_rpc_method_handler(upload)
    options = [("grpc.max_receive_message_length", 64 << 20)]
    serve_grpc(GRPC_SERVICE, {"Upload": method}, address, ready, stop, out, RUN_TIMEOUT_S + 60, options)


def grpc_sender(address: str, total: int, chunk: int, crc: bool, ready: Any, done: Any, out: Any) -> None:
    async def send() -> None:
        import grpc

        checksum = 0

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal checksum
            for piece in pieces(total, chunk):
                if crc:
                    checksum = zlib.crc32(piece, checksum)
                yield piece

        if not await wait_event(ready, 60):
            raise TimeoutError("the server process did not start")
        options = [("grpc.max_send_message_length", 64 << 20)]
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            upload = channel.stream_unary(GRPC_METHOD)
            start = time.perf_counter()
            answer = await upload(chunks(), timeout=RUN_TIMEOUT_S)
            out.put((int.from_bytes(answer, "little"), time.perf_counter() - start, peak_rss_mb(), checksum))
        await wait_event(done, 120)

    try:
        asyncio.run(send())
    except Exception as exc:
        out.put(f"grpc client: {type(exc).__name__}: {exc}")
        raise


def run_grpc(total: int, chunk: int, crc: bool) -> Result:
    return _run_pair(grpc_receiver, grpc_sender, f"127.0.0.1:{free_tcp_port()}", total, chunk, crc)


# -- plain asyncio streams --------------------------------------------------------------------------------------


async def _open_server(handle: Callable[..., Any], address: str) -> asyncio.Server:
    if address.startswith("unix:"):
        return await asyncio.start_unix_server(handle, address[5:], limit=1 << 20)
    host, port = address.rsplit(":", 1)
    return await asyncio.start_server(handle, host, int(port), limit=1 << 20)


async def _open_connection(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if address.startswith("unix:"):
        return await asyncio.open_unix_connection(address[5:])
    host, port = address.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


def socket_receiver(address: str, crc: bool, ready: Any, stop: Any, out: Any) -> None:
    async def serve() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            start = 0.0
            count = checksum = 0
            read = reader.read
            while data := await read(1 << 20):
                if not count:
                    start = time.perf_counter()
                count += len(data)
                if crc:
                    checksum = zlib.crc32(data, checksum)
            out.put((count, time.perf_counter() - start, peak_rss_mb(), checksum))
            writer.close()

        server = await _open_server(handle, address)
        async with server:
            ready.set()
            await wait_event(stop, RUN_TIMEOUT_S + 60)

    try:
        asyncio.run(serve())
    except Exception as exc:
        out.put(f"socket server: {type(exc).__name__}: {exc}")
        raise


def socket_sender(address: str, total: int, chunk: int, crc: bool, ready: Any, done: Any, out: Any) -> None:
    async def send() -> None:
        if not await wait_event(ready, 60):
            raise TimeoutError("the server process did not start")
        _, writer = await _open_connection(address)
        start = time.perf_counter()
        sent = checksum = 0
        async with asyncio.timeout(RUN_TIMEOUT_S):
            for piece in pieces(total, chunk):
                writer.write(piece)
                if crc:
                    checksum = zlib.crc32(piece, checksum)
                sent += len(piece)
                await writer.drain()
            writer.write_eof()
            await writer.drain()
        out.put((sent, time.perf_counter() - start, peak_rss_mb(), checksum))
        await wait_event(done, 120)
        writer.close()

    try:
        asyncio.run(send())
    except Exception as exc:
        out.put(f"socket client: {type(exc).__name__}: {exc}")
        raise


def run_socket(total: int, chunk: int, crc: bool, unix: bool) -> Result:
    with tempfile.TemporaryDirectory(prefix="stream-bench-") as tmp:
        address = f"unix:{tmp}/stream.sock" if unix else f"127.0.0.1:{free_tcp_port()}"
        return _run_pair(socket_receiver, socket_sender, address, total, chunk, crc)


def _run_pair(
    receiver: Callable[..., None], sender: Callable[..., None], address: str, total: int, chunk: int, crc: bool
) -> Result:
    with children() as group:
        ctx = group.ctx
        ready, stop, done, out, sent_out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        server = group.start(receiver, address, crc, ready, stop, out)
        client = group.start(sender, address, total, chunk, crc, ready, done, sent_out)
        received, sent = _collect(out, sent_out)
        done.set()
        group.join(client, 15)
        stop.set()
        group.join(server, 15)
    return _check(Result(received, sent, chunk), total, crc)


# -- main ------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=1 << 30, help="bytes streamed per row (default: 1 GiB)")
    parser.add_argument(
        "--term-length", type=int, default=4 << 20, help="ours: ipc_term_length and term_length (default: 4 MiB)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 32 MiB per row")
    parser.add_argument(
        "--big-mtu",
        type=int,
        default=8192,
        help="ours, the '8 KiB frames' row: the IPC frame size (mtu); at most 8192, the largest message of the "
        "end point's 64 KiB handshake logs (default: %(default)s)",
    )
    parser.add_argument(
        "--udp-window",
        type=int,
        default=1 << 20,
        help="ours, the UDP '1 MiB window' row: the receiver window (default: %(default)s; Aeron's is 128 KiB)",
    )
    parser.add_argument("--peer-crc", action="store_true", help="the peers compute a CRC-32 on both ends, as ours")
    parser.add_argument("--only", default="", help="run only rows whose name contains this")
    parser.add_argument("--profile", action="store_true", help="cProfile our sender and receiver (slows them down)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    total = 32 << 20 if args.quick else args.bytes
    term = args.term_length
    if total < 1:
        parser.error("--bytes must be at least 1")
    if term < 64 << 10 or term & (term - 1):
        parser.error("--term-length must be a power of two of at least 64 KiB")
    chunk = chunk_size_for(term)

    rows: dict[str, Callable[[], Result]] = {
        OURS_IPC: functools.partial(run_endpoint, total, term, Tuning(), False, args.profile),
        OURS_IPC + BIG_MTU: functools.partial(
            run_endpoint, total, term, Tuning(ipc_mtu=args.big_mtu), False, args.profile
        ),
        OURS_UDP: functools.partial(run_endpoint, total, term, Tuning(), True, args.profile),
        OURS_UDP + BIG_WINDOW: functools.partial(
            run_endpoint, total, term, Tuning(udp_window=args.udp_window), True, args.profile
        ),
        GRPC_TCP: functools.partial(run_grpc, total, chunk, args.peer_crc),
        TCP_FLOOR: functools.partial(run_socket, total, chunk, args.peer_crc, False),
        UNIX_FLOOR: functools.partial(run_socket, total, chunk, args.peer_crc, True),
    }
    results: dict[str, Result] = {}
    failed: list[str] = []
    for name, run in rows.items():
        if args.only and args.only not in name:
            continue
        try:
            results[name] = done = run()
        except Exception as exc:  # one broken row must not hide the others
            print(f"  {name}: FAILED: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        print(f"  {name}: {done.mb_per_s:,.0f} MB/s", file=sys.stderr, flush=True)

    table = [
        (
            name,
            r.mb_per_s,
            r.sent.bytes / r.sent.seconds / MB if r.sent.seconds else 0.0,
            r.sent.peak_rss_mb,
            r.received.peak_rss_mb,
        )
        for name, r in results.items()
    ]
    print_table(
        f"Stream throughput, {total:,} bytes client -> server in chunks of {chunk:,} bytes, separate processes "
        f"(ours: term length {term:,})",
        ["", "MB/s", "sender MB/s", "sender peak RSS MB", "receiver peak RSS MB"],
        table,
    )
    print("  (MB = 10^6 bytes; MB/s at the receiver, first byte to last; peak RSS: ru_maxrss of each process)")

    ratios = []
    for name in (OURS_IPC, OURS_IPC + BIG_MTU, OURS_UDP, OURS_UDP + BIG_WINDOW):
        r = results.get(name)
        if r is None:
            continue
        cells = []
        for peer in (GRPC_TCP, TCP_FLOOR, UNIX_FLOOR):
            p = results.get(peer)
            cells.append(f"{r.mb_per_s / p.mb_per_s:.2f}" if p is not None and p.mb_per_s else "-")
        ratios.append((name, *cells))
    if ratios:
        print_table(
            "Ratios ours / peer, MB/s (> 1: ours is faster)",
            ["", "x grpc tcp", "x asyncio tcp", "x asyncio unix"],
            ratios,
        )

    bars = [(name, results[name]) for name in (OURS_IPC, OURS_IPC + BIG_MTU) if name in results]
    if bars:
        print(f"\nBars ({total:,} bytes, term length {term:,})")
    for name, r in bars:
        peak = max(r.sent.peak_rss_mb, r.received.peak_rss_mb)
        met = "MET" if r.mb_per_s >= THROUGHPUT_BAR else "NOT MET"
        print(f"  {name}: {r.mb_per_s:,.0f} MB/s >= {THROUGHPUT_BAR:g}: {met}")
        met = "MET" if peak < MEMORY_BAR else "NOT MET"
        print(f"  {name}: peak RSS {peak:.0f} MB (the larger process) < {MEMORY_BAR:g} MB: {met}")

    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
