"""Killed end points do not leak driver directories: the next process of the same naming reclaims them.

A client with ``unique_aeron_dir`` runs a driver of its own on ``<aeron_dir>-<pid>-<random>``; SIGKILLed, it
cannot remove it, and such directories live in /dev/shm, which is memory. A process launching a driver
removes those of its naming whose owner is dead. Killing such clients again and again leaves at most the
last one's directory, not one per kill.
"""

from __future__ import annotations

import re
import sys
from functools import partial
from pathlib import Path

import pytest

from driver.ownership import OwnerState, owner_state
from support.endpoints import running_server, server_config, wait_until
from support.logged_process import LoggedProcess

pytestmark = [pytest.mark.process, pytest.mark.slow]

CLIENT = Path(__file__).with_name("unique_client.py")
ROUNDS = 4
"""Three reclaims of a killed client's directory, each asserted, prove "again and again" (each round is
a process start: the cost of this test)."""


def _their_dirs(base: Path) -> list[Path]:
    pattern = re.compile(re.escape(base.name) + r"-\d+-[0-9a-f]{8}")
    return sorted(p for p in base.parent.iterdir() if pattern.fullmatch(p.name))


def _size(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


async def test_killed_clients_with_their_own_directories_leave_no_pile(
    aeron_dir: Path, port: int, tmp_path: Path
) -> None:
    base = tmp_path / "clients" / "endpoint"
    base.parent.mkdir()
    sizes: list[int] = []
    async with running_server(server_config(aeron_dir, port)):
        for round_no in range(ROUNDS):
            args = [sys.executable, str(CLIENT), "--port", str(port), "--aeron-dir", str(base)]
            with LoggedProcess.spawn(args, tmp_path / f"client-{round_no}.log") as client:
                await wait_until(
                    partial(client.has, "connected "), 60, 0.02, f"round {round_no}: the client to connect"
                )
                own = Path(client.output().split("connected ", 1)[1].split()[0])
                # The dead clients' directories were reclaimed when this one launched its driver.
                assert _their_dirs(base) == [own], _their_dirs(base)
                assert owner_state(own) is OwnerState.ALIVE
                sizes.append(_size(own))
            # The kill left it behind, dead: what the next launch must reclaim.
            assert _their_dirs(base) == [own]
            assert owner_state(own) is OwnerState.DEAD
    total = sum(_size(p) for p in _their_dirs(base))
    assert len(_their_dirs(base)) == 1
    assert total <= max(sizes)  # one directory's worth, not ROUNDS of them
