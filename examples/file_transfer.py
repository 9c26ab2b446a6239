"""File transfer over an end point connection: ``conn.send_file`` on one side, ``on_stream`` + ``save`` on the other.

::

    python examples/file_transfer.py receive DOWNLOADS --port 24031          # a server; saves into DOWNLOADS
    python examples/file_transfer.py send some/file.bin --port 24031         # a client; sends one file
    python examples/file_transfer.py demo [--size-mib 64]                    # both in one process, a temp file

The sender hashes the file (SHA-256), connects and streams it with
``conn.send_file(path, metadata={"sha256": ...}, progress=...)``: the file is
read a chunk at a time straight into the frame that is offered, so memory stays
flat whatever the size, and the driver's flow control paces the sender to the
receiver. The receiver's ``on_stream`` listener saves it with
``stream.save(path, progress=...)`` (a temporary file renamed when whole, removed
on failure), the stream's own length and CRC-32 are checked at its end, and the
receiver compares the SHA-256 of what it saved with the sender's, then closes
the connection with a reason saying so: the sender waits for that verdict.

Both sides draw a rich progress bar. Bulk transfers want bigger terms than the
end point default of 64 KiB (which caps a message, hence a chunk, at 8 KiB):
``--term-length`` (default 4 MiB) sets ``term_length`` and ``ipc_term_length``.
The receiver stops after ``--count`` files (0: when stopped with Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

import endpoint
from endpoint import (
    Client,
    ClientConfiguration,
    ClientRejectedError,
    ClientTimeoutError,
    Connection,
    EndpointError,
    Server,
    ServerConfiguration,
    ServerError,
)
from endpoint.errors import StreamError
from endpoint.streaming import IncomingStream

__all__ = ["main", "parse_args"]

VERIFIED = "verified"
"""The receiver's close reason starts with this when the file arrived whole and its SHA-256 matched."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def progress_bars(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def say(progress: Progress, text: str) -> None:
    """A line above the bars (plain print would tear them)."""
    progress.console.print(text, highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------- receiving


class Receiver:
    """A server saving every incoming stream into ``directory``; ``finished`` is set after ``count`` files."""

    def __init__(self, args: argparse.Namespace, directory: Path, progress: Progress) -> None:
        self.directory = directory
        self.progress = progress
        self.count = args.count
        self.received = 0
        self.failed = 0
        self.finished = asyncio.Event()
        self.server = Server(
            ServerConfiguration(
                port=args.port,
                listen_address=args.host,
                aeron_dir=args.aeron_dir,
                term_length=args.term_length,
                ipc_term_length=args.term_length,
            )
        )
        self.server.on_stream(self.receive)
        self.server.on_error(self.error)

    async def receive(self, conn: Connection, stream: IncomingStream) -> None:
        name = Path(stream.name).name  # never a path the sender chose: only its last part, in our directory
        if not name or name.startswith("."):
            stream.cancel(f"refusing the file name {stream.name!r}")
            return
        target = self.directory / name
        task = self.progress.add_task(f"receive {name}", total=stream.size if stream.size >= 0 else None)

        def advance(done: int, size: int) -> None:
            self.progress.update(task, completed=done)

        start = time.perf_counter()
        try:
            size = await stream.save(target, progress=advance)
        except (StreamError, EndpointError) as exc:
            say(self.progress, f"receiver: {name} failed: {type(exc).__name__}: {exc}")
            self.failed += 1
            self._done_one()
            return
        seconds = time.perf_counter() - start
        digest = await asyncio.to_thread(sha256_of, target)
        expected = stream.metadata.get("sha256") if isinstance(stream.metadata, dict) else None
        verdict = "matches the sender's" if digest == expected else f"DIFFERS from the sender's {expected}"
        say(self.progress, f"receiver: saved {target} ({size:,} bytes in {seconds:.2f} s)")
        say(self.progress, f"receiver: sha256 {digest} {verdict}")
        if digest == expected:
            self.received += 1
            await conn.close(f"{VERIFIED}: {name}, {size} bytes, sha256 {digest}")
        else:
            self.failed += 1
            await conn.close(f"checksum mismatch: {name}")
        self._done_one()

    def _done_one(self) -> None:
        if self.count and self.received + self.failed >= self.count:
            self.finished.set()

    def error(self, conn: Connection | None, exc: BaseException) -> None:
        say(self.progress, f"receiver: error on {conn!r}: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- sending


async def send(args: argparse.Namespace, path: Path, progress: Progress) -> bool:
    """Connect, stream ``path``, wait for the receiver's verdict; True when it verified the file."""
    size = path.stat().st_size
    digest = await asyncio.to_thread(sha256_of, path)
    say(progress, f"sender: {path.name}: {size:,} bytes, sha256 {digest}")
    config = ClientConfiguration(
        aeron_dir=args.aeron_dir,
        prefer_ipc=not args.udp,
        connect_timeout=args.connect_timeout,
        term_length=args.term_length,
        ipc_term_length=args.term_length,
    )
    async with Client(config) as client:
        try:
            conn = await client.connect(args.host, args.port)
        except ClientRejectedError as exc:
            say(progress, f"sender: rejected: {exc.reason.name}: {exc.detail}")
            return False
        except ClientTimeoutError:
            say(progress, f"sender: no receiver at {args.host}:{args.port} (within {args.connect_timeout:g} s)")
            return False
        except EndpointError as exc:
            say(progress, f"sender: cannot connect: {type(exc).__name__}: {exc}")
            return False
        transport = "ipc" if conn.is_ipc else "udp"
        say(progress, f"sender: connected over {transport}, chunks of {conn.streams.chunk_size:,}")
        task = progress.add_task(f"send {path.name}", total=size)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done)

        start = time.perf_counter()
        try:
            sent = await conn.send_file(path, metadata={"sha256": digest}, progress=advance)
        except (StreamError, EndpointError) as exc:
            say(progress, f"sender: failed: {type(exc).__name__}: {exc}")
            return False
        seconds = time.perf_counter() - start
        say(progress, f"sender: sent {sent:,} bytes in {seconds:.2f} s ({sent / max(seconds, 1e-9) / 1e6:,.0f} MB/s)")
        try:  # the receiver closes the connection once it has checked the file; its reason is the verdict
            await asyncio.wait_for(conn.wait_closed(), args.timeout)
        except TimeoutError:
            say(progress, f"sender: no verdict from the receiver within {args.timeout:g} s")
            await conn.close("gave up waiting")
            return False
    say(progress, f"sender: receiver says: {conn.close_reason}")
    return conn.close_reason.startswith(VERIFIED)


# --------------------------------------------------------------------------- commands


async def receive_command(args: argparse.Namespace, progress: Progress) -> int:
    directory = Path(args.directory)
    directory.mkdir(parents=True, exist_ok=True)
    receiver = Receiver(args, directory, progress)
    try:
        await receiver.server.bind()
    except ServerError as exc:
        say(progress, f"receiver: {exc}")
        return 1
    say(progress, f"receiver: listening on {args.host}:{args.port}, saving into {directory}")
    try:
        await receiver.finished.wait()  # or Ctrl-C / SIGTERM: endpoint.run cancels us
    finally:
        await receiver.server.close()
        say(progress, f"receiver: stopped, {receiver.received} file(s) verified, {receiver.failed} failed")
    return 0 if not receiver.failed and (not args.count or receiver.received >= args.count) else 1


async def send_command(args: argparse.Namespace, progress: Progress) -> int:
    path = Path(args.path)
    if not path.is_file():
        say(progress, f"sender: {path}: not a file")
        return 2
    return 0 if await send(args, path, progress) else 1


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def demo_command(args: argparse.Namespace, progress: Progress) -> int:
    """A receiver and a sender in this process, on one driver (IPC), moving a fresh random file."""
    work = Path(tempfile.mkdtemp(prefix="file-transfer-demo-"))
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    args.aeron_dir = args.aeron_dir or str(base / f"endpoint-file-transfer-{os.getpid()}-{os.urandom(3).hex()}")
    args.port = args.port or free_udp_port()
    args.count = 1
    try:
        source = work / "random.bin"
        with open(source, "wb") as out:
            for _ in range(args.size_mib):
                out.write(os.urandom(1 << 20))
        receiver = Receiver(args, work / "received", progress)
        receiver.directory.mkdir()
        async with receiver.server:
            say(progress, f"demo: receiver listening on {args.host}:{args.port}, sending {source}")
            ok = await send(args, source, progress)
            await asyncio.wait_for(receiver.finished.wait(), args.timeout)
        copy = receiver.directory / source.name
        same = ok and copy.exists() and copy.read_bytes() == source.read_bytes()
        say(progress, f"demo: {'the copy is identical' if same else 'the copy DIFFERS'}")
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(args.aeron_dir, ignore_errors=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Send files over an end point connection, with progress bars.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--host", default="127.0.0.1", help="the receiver's address (default: %(default)s)")
    common.add_argument("--aeron-dir", default=None, help="driver directory; sharing the receiver's gives IPC")
    common.add_argument("--term-length", type=int, default=4 << 20, help="term length, both sides (default: 4 MiB)")
    common.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the receiver's verdict")
    sub = p.add_subparsers(dest="command", required=True)
    receive = sub.add_parser("receive", parents=[common], help="listen and save incoming files into DIRECTORY")
    receive.add_argument("directory")
    receive.add_argument("--port", type=int, default=24031, help="UDP port (default: %(default)s)")
    receive.add_argument("--count", type=int, default=1, help="stop after this many files; 0 = never (default: 1)")
    send = sub.add_parser("send", parents=[common], help="send the file at PATH to a receiver")
    send.add_argument("path")
    send.add_argument("--port", type=int, default=24031, help="the receiver's port (default: %(default)s)")
    send.add_argument("--udp", action="store_true", help="use UDP even when IPC would be possible")
    send.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to find the receiver")
    demo = sub.add_parser("demo", parents=[common], help="send a random file to a receiver in this process")
    demo.add_argument("--size-mib", type=int, default=64, help="size of the random file (default: %(default)s MiB)")
    demo.add_argument("--port", type=int, default=0, help="UDP port (default: a free one)")
    demo.set_defaults(udp=False, connect_timeout=10.0)
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    commands: dict[str, Any] = {"receive": receive_command, "send": send_command, "demo": demo_command}
    with progress_bars(Console()) as progress:
        return int(await commands[args.command](args, progress))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return endpoint.run(lambda: run(args))  # Ctrl-C or SIGTERM closes gracefully


if __name__ == "__main__":
    sys.exit(main())
