"""Publication and Image over a log file we initialise ourselves (no driver): positions, rotation, codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.client import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    BufferClaim,
    ConcurrentPublication,
    ExclusivePublication,
    Header,
)
from driver.logbuffer.descriptor import set_is_connected
from support.publication_logs import INITIAL_TERM_ID, TERM, Log


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    made = Log(tmp_path / "pub.logbuffer")
    yield made
    made.close()


@pytest.mark.parametrize("cls", [ConcurrentPublication, ExclusivePublication])
def test_not_connected_then_back_pressured(log: Log, cls: Any) -> None:
    publication = log.publication(cls)
    assert publication.offer(b"x") == NOT_CONNECTED
    set_is_connected(log.buffers.metadata, True)
    assert publication.offer(b"x") == BACK_PRESSURED
    log.limit.put_long(0, 64)
    assert publication.offer(b"x") == 64
    assert publication.offer(b"x") == BACK_PRESSURED
    assert publication.position == 64


@pytest.mark.parametrize("cls", [ConcurrentPublication, ExclusivePublication])
def test_rotation_through_int32_term_id_wrap(log: Log, cls: Any) -> None:
    publication = log.publication(cls)
    image = log.image()
    set_is_connected(log.buffers.metadata, True)
    log.limit.put_long(0, 1 << 40)
    received: list[tuple[bytes, int, int]] = []

    def handler(payload: memoryview, header: Header) -> None:
        received.append((bytes(payload), header.position, header.term_id))

    sent: list[tuple[bytes, int]] = []
    admin_actions = 0
    for i in range(8 * TERM // 1024):
        message = i.to_bytes(4, "little") * 200
        while (result := publication.offer(message)) == ADMIN_ACTION:
            admin_actions += 1
        assert result > 0
        sent.append((message, result))
        image.poll(handler, 100)
        log.clean_to(image.position)
    while image.poll(handler, 100):
        log.clean_to(image.position)
    assert admin_actions >= 6
    assert [(m, p) for m, p, _ in received] == sent
    assert {term_id for _, _, term_id in received} >= {0x7FFF_FFFF, -0x8000_0000}
    assert image.position == publication.position == sent[-1][1]


@pytest.mark.parametrize("cls", [ConcurrentPublication, ExclusivePublication])
def test_batch_and_claim(log: Log, cls: Any) -> None:
    publication = log.publication(cls)
    image = log.image()
    set_is_connected(log.buffers.metadata, True)
    log.limit.put_long(0, 1 << 40)
    batch = [bytes([i]) * (i * 7) for i in range(40)]
    claim = BufferClaim()
    expected: list[bytes] = []
    got: list[bytes] = []
    for _ in range(200):
        while (result := publication.offer_batch(batch)) == ADMIN_ACTION:
            pass
        assert result > 0
        expected.extend(batch)
        while (result := publication.try_claim(5, claim)) == ADMIN_ACTION:
            pass
        claim.buffer[:] = b"claim"
        claim.commit()
        expected.append(b"claim")
        while image.poll(lambda p, h: got.append(bytes(p)), 1000):
            log.clean_to(image.position)
    assert got == expected


@pytest.mark.parametrize("cls", [ConcurrentPublication, ExclusivePublication])
def test_max_position_exceeded(tmp_path: Path, cls: Any) -> None:
    last_term_id = (INITIAL_TERM_ID + (1 << 31) - 1 + (1 << 31)) % (1 << 32) - (1 << 31)
    log = Log(tmp_path / "end.logbuffer", term_id=last_term_id, term_offset=TERM - 64)
    try:
        set_is_connected(log.buffers.metadata, True)
        log.limit.put_long(0, 1 << 62)
        publication = log.publication(cls)
        assert publication.position == publication.max_possible_position - 64
        assert publication.offer(bytes(16)) == publication.max_possible_position  # 48 bytes, aligned to 64
        assert publication.offer(bytes(100)) == MAX_POSITION_EXCEEDED
    finally:
        log.close()


def test_offer_rejects_bad_lengths(log: Log) -> None:
    publication = log.publication(ConcurrentPublication)
    set_is_connected(log.buffers.metadata, True)
    log.limit.put_long(0, 1 << 40)
    with pytest.raises(ValueError, match="max_message_length"):
        publication.offer(bytes(TERM // 8 + 1))
    with pytest.raises(ValueError, match="at least one"):
        publication.offer_batch([])
    with pytest.raises(ValueError, match="term length"):
        publication.offer_batch([bytes(1000)] * 100)
