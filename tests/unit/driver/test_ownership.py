"""The driver directory's lock: alive while held, dead once released (or its holder died), never kept by a fork."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.ownership import (
    LOCK_FILE,
    DirectoryLock,
    OwnerState,
    OwnerWatch,
    owner_state,
    process_is_alive,
    process_start_time,
    reclaim_dead_siblings,
)


def _finished_pid() -> int:
    """The pid of a process that has run and been reaped (not reused this soon on a test machine)."""
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    return child.pid


def test_lock_says_alive_while_held_and_dead_once_released(tmp_path: Path) -> None:
    assert owner_state(tmp_path) is OwnerState.UNKNOWN  # no lock file: a real Aeron driver's directory
    lock = DirectoryLock.acquire(tmp_path)
    try:
        assert owner_state(tmp_path) is OwnerState.ALIVE
        pid, start = (tmp_path / LOCK_FILE).read_text().split()
        assert int(pid) == os.getpid()
        assert start == str(process_start_time(os.getpid()))
        assert [p.name for p in tmp_path.iterdir()] == [LOCK_FILE]  # the temporary name was renamed away
    finally:
        lock.close()
    assert owner_state(tmp_path) is OwnerState.DEAD
    lock.close()  # idempotent


def test_lock_of_a_killed_process_is_released(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from driver.ownership import DirectoryLock; "
        "DirectoryLock.acquire(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"locked"
        assert owner_state(tmp_path) is OwnerState.ALIVE
        watch = OwnerWatch.open(tmp_path)
        assert watch is not None
        assert watch.owner_pid() == child.pid
        assert watch.owner_alive()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        assert owner_state(tmp_path) is OwnerState.DEAD
        assert not watch.owner_alive()
        watch.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        if child.stdout is not None:
            child.stdout.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_keep_the_lock(tmp_path: Path) -> None:
    lock = DirectoryLock.acquire(tmp_path)
    read, write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say it runs, wait for the parent to let go, then report what it sees
        try:
            os.close(write)
            os.close(ready_read)
            os.write(ready_write, b"r")
            os.read(read, 1)
            os._exit(0 if owner_state(tmp_path) is OwnerState.DEAD else 1)
        finally:
            os._exit(2)
    os.close(read)
    os.close(ready_write)
    try:
        assert os.read(ready_read, 1) == b"r"  # the child's at-fork hooks have run
        os.close(ready_read)
        assert owner_state(tmp_path) is OwnerState.ALIVE
        lock.close()
        # The child lives on, yet the lock is free: the child closed its copy of the descriptor at fork.
        assert owner_state(tmp_path) is OwnerState.DEAD
    finally:
        os.close(write)
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_process_identity_includes_its_start_time() -> None:
    me = os.getpid()
    start = process_start_time(me)
    assert start is not None
    assert process_is_alive(me) is True
    assert process_is_alive(me, start) is True
    assert process_is_alive(me, start + 1) is False  # the same pid, another process: reused
    assert process_is_alive(_finished_pid()) is False


def test_reclaim_removes_only_dead_directories_of_its_naming(tmp_path: Path) -> None:
    base = tmp_path / "endpoint-app-user"
    alive = tmp_path / f"{base.name}-{os.getpid()}-0123abcd"
    dead = tmp_path / f"{base.name}-{os.getpid()}-deadbeef"
    unlocked_gone = tmp_path / f"{base.name}-{_finished_pid()}-00000000"
    unlocked_running = tmp_path / f"{base.name}-{os.getpid()}-11111111"
    other = tmp_path / f"{base.name}-x-deadbeef"
    for path in (base, alive, dead, unlocked_gone, unlocked_running, other):
        path.mkdir()
        (path / "cnc.dat").write_bytes(b"\0" * 128)
    held = DirectoryLock.acquire(alive)
    DirectoryLock.acquire(dead).close()
    try:
        removed = reclaim_dead_siblings(base)
    finally:
        held.close()
    assert sorted(removed) == sorted([dead, unlocked_gone])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (base, alive, unlocked_running, other))
