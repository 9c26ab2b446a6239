"""Our readers on a directory written by the real Java 1.15.1 MediaDriver.

The counters test maps ``cnc.dat`` by hand (the v15 layout below) so that it checks
our CountersReader on its own; the CnC test checks our CncFile and then reads the
counters again through the buffers it hands out.
"""

from __future__ import annotations

import contextlib
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cnc import CncFile, CncGeneration
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersReader
from support.aeron_java import AeronJava, JavaMediaDriver, aeron_stat_snapshot
from support.ports import free_udp_port
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process]

# CnC v15: int32 version @0, then int32 lengths of to-driver @4, to-clients @8, counters
# metadata @12, counters values @16 and error log @20; the buffers follow in that order
# from offset 128 (the 48-byte header aligned to two cache lines).
CNC_BUFFERS_OFFSET = 128
RECEIVE_CHANNEL_STATUS_TYPE_ID = 7
CLIENT_HEARTBEAT_TYPE_ID = 11


@contextlib.contextmanager
def _counters_of(cnc_path: Path) -> Iterator[CountersReader]:
    with cnc_path.open("r+b") as fh, mmap.mmap(fh.fileno(), 0) as mapped:
        to_driver, to_clients, meta_len, values_len = struct.unpack_from("<4i", mapped, 4)
        meta_off = CNC_BUFFERS_OFFSET + to_driver + to_clients
        metadata = AtomicBuffer(mapped, meta_off, meta_len)
        values = AtomicBuffer(mapped, meta_off + meta_len, values_len)
        try:
            yield CountersReader(metadata, values)
        finally:
            metadata.release()
            values.release()


def _listing(reader: CountersReader) -> list[tuple[int, int, str]]:
    found: list[tuple[int, int, str]] = []
    reader.for_each(lambda counter_id, type_id, _key, label: found.append((counter_id, type_id, label)))
    return found


@pytest.fixture
def java_subscriber(aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path) -> Iterator[None]:
    """A Java BasicSubscriber on a UDP channel, so the driver also holds client and channel counters."""
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    proc = aeron_java.start(
        "io.aeron.samples.BasicSubscriber",
        props={"aeron.dir": str(java_media_driver.aeron_dir), "aeron.sample.channel": channel},
        output=tmp_path / "basic-subscriber.log",
    )
    try:
        with _counters_of(java_media_driver.cnc_path) as reader:

            def counter_types() -> set[int]:
                return {type_id for _, type_id, _ in _listing(reader)}

            execute_until(
                lambda: {RECEIVE_CHANNEL_STATUS_TYPE_ID, CLIENT_HEARTBEAT_TYPE_ID} <= counter_types(),
                timeout_s=30.0,
                interval_s=0.05,
                description="the subscriber's client and receive-channel counters",
            )
        yield
    finally:
        AeronJava.stop(proc)


@pytest.mark.usefixtures("java_subscriber")
def test_our_counters_reader_lists_what_aeron_stat_prints(
    aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    _, stat = aeron_stat_snapshot(aeron_java, java_media_driver.aeron_dir, tmp_path / "aeron-stat.log")

    with _counters_of(java_media_driver.cnc_path) as reader:
        ours = _listing(reader)
        assert [reader.get_counter_label(c.counter_id) for c in stat] == [c.label for c in stat]

    assert [(counter_id, label) for counter_id, _, label in ours] == [(c.counter_id, c.label) for c in stat]
    assert len(ours) > 25  # the 25 system counters plus the subscriber's
    assert {type_id for _, type_id, _ in ours} >= {0, RECEIVE_CHANNEL_STATUS_TYPE_ID, CLIENT_HEARTBEAT_TYPE_ID}


def test_our_cnc_file_maps_the_java_driver_directory(
    aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    with CncFile.map_existing(java_media_driver.aeron_dir, timeout_s=10.0) as cnc:
        assert cnc.version == 15
        assert cnc.generation is CncGeneration.V15
        assert cnc.pid == java_media_driver.pid
        assert cnc.client_liveness_timeout_ns == 5_000_000_000  # 1.15.1 default
        assert cnc.counters_values_buffer.capacity == 1024 * 1024
        assert cnc.counters_metadata_buffer.capacity == 4 * 1024 * 1024
        assert cnc.error_log_buffer.capacity == 1024 * 1024
        ours = [
            (counter_id, label)
            for counter_id, _, label in _listing(
                CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
            )
        ]

    _, stat = aeron_stat_snapshot(aeron_java, java_media_driver.aeron_dir, tmp_path / "aeron-stat.log")
    assert ours == [(c.counter_id, c.label) for c in stat]
