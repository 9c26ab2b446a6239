"""The doorbell of a driver run by its host: clients ring only while the host sleeps, and the ring arrives."""

from __future__ import annotations

import select
from pathlib import Path

from driver.doorbell import DOORBELL_FILE, Doorbell, DoorbellRinger


def readable(doorbell: Doorbell, timeout_s: float) -> bool:
    ready, _, _ = select.select([doorbell.socket], [], [], timeout_s)
    return bool(ready)


def test_a_ringer_rings_only_while_the_host_is_parked(tmp_path: Path) -> None:
    doorbell = Doorbell(tmp_path)
    ringer = DoorbellRinger.open(tmp_path)
    assert ringer is not None
    try:
        assert not ringer.ring_if_parked()  # awake: no datagram
        assert not readable(doorbell, 0.05)
        doorbell.park()
        assert ringer.ring_if_parked()
        assert readable(doorbell, 10)
        doorbell.unpark()  # drains what came
        assert not readable(doorbell, 0.05)
        assert not ringer.ring_if_parked()
        assert ringer.rings == 1
    finally:
        ringer.close()
        doorbell.close()


def test_no_doorbell_or_a_foreign_file_gives_no_ringer(tmp_path: Path) -> None:
    assert DoorbellRinger.open(tmp_path) is None
    (tmp_path / DOORBELL_FILE).write_bytes(b"\x07" * 64)  # another version
    assert DoorbellRinger.open(tmp_path) is None
    (tmp_path / DOORBELL_FILE).write_bytes(b"\x01")  # too short
    assert DoorbellRinger.open(tmp_path) is None


def test_a_ring_to_a_closed_host_is_not_an_error(tmp_path: Path) -> None:
    doorbell = Doorbell(tmp_path)
    ringer = DoorbellRinger.open(tmp_path)
    assert ringer is not None
    doorbell.park()
    doorbell.close()
    try:
        ringer.ring_if_parked()  # the port is closed now: no exception either way
    finally:
        ringer.close()
