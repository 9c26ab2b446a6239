"""The mark file: one archive per directory, in this process or another, released however the holder ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.archive.errors import ArchiveError, ArchiveInUseError
from driver.archive.mark import MARK_FILE, MarkFile

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
        record = json.loads((tmp_path / "archive" / MARK_FILE).read_text())
        assert record["pid"] == os.getpid()
        assert record["control_channel"] == "aeron:ipc?control"
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
    assert json.loads((tmp_path / MARK_FILE).read_text())["pid"] == child.process.pid
    mark = MarkFile(tmp_path)
    try:
        assert json.loads((tmp_path / MARK_FILE).read_text())["pid"] == os.getpid()
    finally:
        mark.close()
