"""The game server example with its bots behind a NAT (see support/nat.py): the server in its own namespace with
no route back to the bots' private network, the bots' two processes behind the router's masquerade. Nothing in the
example knows about the NAT: the server answers from its control port to wherever the bots' packets come from."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.logged_process import LoggedProcess
from support.nat import SERVER_V4, NatLab
from support.waiting import execute_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

GAME = Path(__file__).resolve().parents[3] / "examples" / "game_server.py"
PORT = 40133


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[LoggedProcess]]:
    """Every process the test starts; each still running at the end is killed with its process group, by pid."""
    processes: list[LoggedProcess] = []
    try:
        yield processes
    finally:
        for process in processes:
            if process.process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)  # the bots' command leads its bot processes' group
                except ProcessLookupError:
                    pass
                process.process.wait(10)
        for path in tmp_path.glob("aeron-*"):
            shutil.rmtree(path, ignore_errors=True)


def test_bots_behind_a_nat_play_in_rooms(nat_lab: NatLab, tmp_path: Path, started: list[LoggedProcess]) -> None:
    common = ["--host", SERVER_V4, "--port", str(PORT)]
    server = LoggedProcess.spawn(
        [*nat_lab.prefix(nat_lab.server), sys.executable, str(GAME), "server", *common, "--room-size", "4",
         "--aeron-dir", str(tmp_path / "aeron-server")],
        tmp_path / "server.log",
    )  # fmt: skip
    started.append(server)
    execute_until(lambda: server.has("Ctrl-C stops"), timeout_s=30, description="the game server up")
    bots = LoggedProcess.spawn(
        [*nat_lab.prefix(nat_lab.client), sys.executable, str(GAME), "bots", *common, "--bots", "6",
         "--processes", "2", "--duration", "3", "--chat-every", "1", "--aeron-dir", str(tmp_path / "aeron-bots")],
        tmp_path / "bots.log",
    )  # fmt: skip
    started.append(bots)
    assert bots.wait(120) == 0, bots.output()
    execute_until(lambda: server.has("players=0 "), timeout_s=30, description="every bot gone from the server")
    server.signal(signal.SIGTERM)
    assert server.wait(30) == 0, server.output()
    played, served = bots.output(), server.output()
    match = re.search(r"^bots: 6 bots in 2 processes: (.*)$", played, re.MULTILINE)
    assert match, played
    totals = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}
    assert totals["connected"] == 6, totals
    assert totals["welcomed"] == 6, totals
    assert totals["lost"] == 0, totals
    assert totals["snapshots"] > 0, totals
    assert totals["joined"] >= 6, totals
    assert totals["chat"] > 0, totals
    assert "Traceback" not in played + served
