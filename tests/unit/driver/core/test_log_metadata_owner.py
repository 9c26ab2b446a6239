"""Today's log metadata and counter owner ids: written in the current generation only."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_conductor_current import Harness

from driver.cnc import CncGeneration
from driver.command.messages import PublicationMessage
from driver.command.responses import PublicationReady
from driver.command.types import CommandType, ResponseType
from driver.concurrent.system_counters import PUBLISHER_LIMIT_TYPE_ID, PUBLISHER_POS_TYPE_ID
from driver.logbuffer.current_metadata import (
    LOG_TYPE_CONCURRENT_PUBLICATION,
    LOG_TYPE_EXCLUSIVE_PUBLICATION,
    read_current_metadata,
)
from driver.logbuffer.log_buffers import LogBuffers
from driver.media.os_buffers import os_socket_buffer_lengths


@pytest.fixture
def current(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "aeron", CncGeneration.CURRENT)
    yield h
    h.close()


@pytest.fixture
def v15(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "aeron-v15", CncGeneration.V15)
    yield h
    h.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _add(h: Harness, channel: str, exclusive: bool) -> PublicationReady:
    command = CommandType.ADD_EXCLUSIVE_PUBLICATION if exclusive else CommandType.ADD_PUBLICATION
    h.send(command, PublicationMessage(h.client_id, h.cid(), 5, channel).encode())
    ready = [
        PublicationReady.decode(body)
        for kind, body in h.work()
        if kind in (ResponseType.ON_PUBLICATION_READY, ResponseType.ON_EXCLUSIVE_PUBLICATION_READY)
    ]
    assert len(ready) == 1
    return ready[0]


def _owners(h: Harness, type_id: int) -> list[int]:
    owners: list[int] = []
    h.counters.for_each(
        lambda counter_id, kind, key, label: (
            owners.append(h.counters.get_counter_owner_id(counter_id)) if kind == type_id else None
        )
    )
    return owners


@pytest.mark.parametrize("exclusive", [True, False])
def test_ipc_publication_log_carries_today_s_fields(current: Harness, exclusive: bool) -> None:
    ready = _add(current, "aeron:ipc?linger=7ms", exclusive)
    log = LogBuffers.map(ready.log_file_name)
    try:
        meta = read_current_metadata(log.metadata)
    finally:
        log.close()
    assert meta.log_type == (LOG_TYPE_EXCLUSIVE_PUBLICATION if exclusive else LOG_TYPE_CONCURRENT_PUBLICATION)
    assert meta.publication_window_length == current.ctx.ipc_publication_term_window_length_for(64 * 1024)
    assert meta.linger_timeout_ns == 7_000_000
    assert meta.signal_eos
    assert (
        meta.os_default_socket_sndbuf_length,
        meta.os_max_socket_sndbuf_length,
        meta.os_default_socket_rcvbuf_length,
        meta.os_max_socket_rcvbuf_length,
    ) == os_socket_buffer_lengths()
    assert _owners(current, PUBLISHER_POS_TYPE_ID) == [current.client_id]
    assert _owners(current, PUBLISHER_LIMIT_TYPE_ID) == [current.client_id]


def test_udp_publication_log_carries_socket_settings(current: Harness) -> None:
    ready = _add(current, f"aeron:udp?endpoint=127.0.0.1:{_free_port()}|so-sndbuf=64k", True)
    log = LogBuffers.map(ready.log_file_name)
    try:
        meta = read_current_metadata(log.metadata)
    finally:
        log.close()
    assert meta.log_type == LOG_TYPE_EXCLUSIVE_PUBLICATION
    assert meta.socket_sndbuf_length == 64 * 1024
    assert meta.socket_rcvbuf_length == current.ctx.socket_rcvbuf_length
    assert not meta.group
    assert _owners(current, PUBLISHER_POS_TYPE_ID) == [current.client_id]


def test_1_15_generation_leaves_them_zero(v15: Harness) -> None:
    ready = _add(v15, "aeron:ipc", True)
    log = LogBuffers.map(ready.log_file_name)
    try:
        meta = read_current_metadata(log.metadata)
    finally:
        log.close()
    assert meta.log_type == 0
    assert meta.publication_window_length == 0
    assert meta.untethered_linger_timeout_ns == 0
    assert _owners(v15, PUBLISHER_POS_TYPE_ID) == [0]
