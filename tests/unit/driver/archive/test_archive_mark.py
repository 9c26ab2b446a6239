"""The mark file: one archive per directory, in this process or another, released however the holder ends; Aeron's
1.15.1 ``archive-mark.dat`` layout."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.archive.errors import ArchiveError, ArchiveInUseError, MarkFileError
from driver.archive.mark import MARK_FILE, MarkFile, read_mark_file

pytestmark = pytest.mark.process

HOLDER = """
import sys, time
from driver.archive.mark import MarkFile
try:
    mark = MarkFile(sys.argv[1], "aeron:ipc?child")
except Exception as exc:
    print(type(exc).__name__, exc, flush=True)
    sys.exit(3)
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin (or kills us)
mark.close()
print("released", flush=True)
"""


class Holder:
    """A child process holding (or failing to take) the mark file of ``archive_dir``."""

    def __init__(self, archive_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(archive_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self.first_line = self.process.stdout.readline().strip()

    def finish(self, timeout_s: float = 10.0) -> tuple[int, str]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        try:
            out, _ = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.process.returncode, out

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.kill()


def test_second_mark_in_this_process_is_refused(tmp_path: Path) -> None:
    mark = MarkFile(tmp_path / "archive", "aeron:ipc?control")
    try:
        header = read_mark_file(tmp_path / "archive")
        assert header.pid == os.getpid()
        assert header.control_channel == "aeron:ipc?control"
        with pytest.raises(ArchiveInUseError, match=str(os.getpid())) as info:
            MarkFile(tmp_path / "archive")
        assert isinstance(info.value, ArchiveError)
        assert str(tmp_path / "archive") in str(info.value)
    finally:
        mark.close()
    mark.close()  # idempotent
    again = MarkFile(tmp_path / "archive")
    again.close()


def test_a_child_cannot_take_our_mark(tmp_path: Path, holders: list[Holder]) -> None:
    mark = MarkFile(tmp_path)
    try:
        child = Holder(tmp_path)
        holders.append(child)
        assert child.first_line.startswith("ArchiveInUseError")
        assert str(os.getpid()) in child.first_line
        code, _ = child.finish()
        assert code == 3
    finally:
        mark.close()


def test_we_cannot_take_a_childs_mark_until_it_releases_it(tmp_path: Path, holders: list[Holder]) -> None:
    child = Holder(tmp_path)
    holders.append(child)
    assert child.first_line == "held"
    with pytest.raises(ArchiveInUseError, match=str(child.process.pid)):
        MarkFile(tmp_path)
    code, out = child.finish()
    assert (code, out.strip()) == (0, "released")
    MarkFile(tmp_path).close()


def test_a_sigkilled_holder_releases_the_mark(tmp_path: Path, holders: list[Holder]) -> None:
    child = Holder(tmp_path)
    holders.append(child)
    assert child.first_line == "held"
    with pytest.raises(ArchiveInUseError):
        MarkFile(tmp_path)
    child.kill()
    assert child.process.returncode == -signal.SIGKILL
    # the dead holder's record is still in the file; only the lock matters
    assert read_mark_file(tmp_path).pid == child.process.pid
    mark = MarkFile(tmp_path)
    try:
        assert read_mark_file(tmp_path).pid == os.getpid()
    finally:
        mark.close()


def test_the_file_is_aeron_1_15_1s_mark_file_header(tmp_path: Path) -> None:
    """MarkFileHeader (schema 100, version 0) at 0 without a message header, strings after its 128-byte block,
    padded to 1 KiB; the activity timestamp moves when the archive says it is alive; the file outlives the mark."""
    before_ms = int(time.time() * 1000)
    mark = MarkFile(
        tmp_path,
        "aeron:udp?endpoint=127.0.0.1:8010",
        control_stream_id=10,
        local_control_channel="aeron:ipc",
        local_control_stream_id=11,
        events_channel="aeron:udp?endpoint=127.0.0.1:8030",
        events_stream_id=30,
        aeron_directory="/dev/shm/aeron-x",
    )
    try:
        raw = (tmp_path / MARK_FILE).read_bytes()
        assert len(raw) == 1024
        version, activity, start, pid, control, local, events = struct.unpack_from("<i4xqqqiii", raw, 0)
        assert (version, pid, control, local, events) == (0, os.getpid(), 10, 11, 30)
        assert before_ms <= start == activity <= int(time.time() * 1000)
        at, strings = 128, []
        for _ in range(4):
            (length,) = struct.unpack_from("<I", raw, at)
            strings.append(raw[at + 4 : at + 4 + length].decode())
            at += 4 + length
        assert strings == [
            "aeron:udp?endpoint=127.0.0.1:8010",
            "aeron:ipc",
            "aeron:udp?endpoint=127.0.0.1:8030",
            "/dev/shm/aeron-x",
        ]
        mark.update_activity_timestamp(start + 5000)
        assert read_mark_file(tmp_path).activity_timestamp == start + 5000
        assert mark.header().events_channel == "aeron:udp?endpoint=127.0.0.1:8030"
    finally:
        mark.close()
    assert read_mark_file(tmp_path).activity_timestamp == start + 5000


@pytest.mark.parametrize("content", [b"", b"x" * 127, b"\0" * 128, b"\0" * 128 + b"\xff\xff\xff\x7f"])
def test_unreadable_mark_files(tmp_path: Path, content: bytes) -> None:
    (tmp_path / MARK_FILE).write_bytes(content)
    with pytest.raises(MarkFileError):
        read_mark_file(tmp_path)


def test_no_mark_file(tmp_path: Path) -> None:
    with pytest.raises(MarkFileError, match="no mark file"):
        read_mark_file(tmp_path)
