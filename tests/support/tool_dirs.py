"""Driver directories built by hand (no driver running) with known contents, for the tools' unit tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

from driver.cnc import CncFile, CncGeneration
from driver.concurrent.counters import CountersManager
from driver.concurrent.error_log import DistinctErrorLog
from driver.concurrent.loss_report import LossReport, LossReportFile
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.concurrent.system_counters import (
    PUBLISHER_LIMIT_NAME,
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_NAME,
    PUBLISHER_POS_TYPE_ID,
    RECEIVE_CHANNEL_STATUS_TYPE_ID,
    RECEIVER_HWM_NAME,
    RECEIVER_HWM_TYPE_ID,
    RECEIVER_POS_NAME,
    RECEIVER_POS_TYPE_ID,
    SENDER_POSITION_NAME,
    SENDER_POSITION_TYPE_ID,
    SystemCounterId,
    SystemCounters,
    allocate_channel_status,
    allocate_client_heartbeat,
    allocate_stream_counter,
    allocate_subscriber_position,
)

__all__ = ["IPC", "UDP", "FakeDriverDir"]

IPC = "aeron:ipc"
UDP = "aeron:udp?endpoint=localhost:40123"


class FakeDriverDir:
    """A cnc.dat (v15 unless told) with system counters, two streams, a client, an error and a loss entry."""

    def __init__(
        self,
        directory: Path,
        *,
        now_ms: int | None = None,
        heartbeat_age_ms: int = 100,
        generation: CncGeneration = CncGeneration.V15,
        ready: bool = True,
    ) -> None:
        self.directory = directory
        self.now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        self.cnc = CncFile.create(
            directory,
            to_driver_length=64 * 1024 + 768,
            to_clients_length=64 * 1024 + 128,
            counters_values_length=256 * 128,
            error_log_length=64 * 1024,
            client_liveness_timeout_ns=5_000_000_000,
            start_timestamp_ms=self.now_ms - 60_000,
            pid=os.getpid(),
            generation=generation,
        )
        self.ring = ManyToOneRingBuffer(self.cnc.to_driver_buffer)
        self.ring.set_consumer_heartbeat_time(self.now_ms - heartbeat_age_ms)
        self.counters = CountersManager(
            self.cnc.counters_metadata_buffer, self.cnc.counters_values_buffer, clock_ms=lambda: self.now_ms
        )
        self.system = SystemCounters(self.counters)
        self.system.get(SystemCounterId.BYTES_SENT).set_ordered(123_456)
        self.system.get(SystemCounterId.ERRORS).set_ordered(1)
        self.client_id = 7
        self.heartbeat_id = allocate_client_heartbeat(self.counters, self.client_id)
        # IPC stream: session 11, stream 1001; publisher at 4096, one subscriber behind it.
        self.ipc_pub_pos = allocate_stream_counter(
            self.counters, PUBLISHER_POS_NAME, PUBLISHER_POS_TYPE_ID, 8, 11, 1001, IPC
        )
        self.ipc_pub_lmt = allocate_stream_counter(
            self.counters, PUBLISHER_LIMIT_NAME, PUBLISHER_LIMIT_TYPE_ID, 8, 11, 1001, IPC
        )
        self.ipc_sub_pos = allocate_subscriber_position(self.counters, 9, 11, 1001, IPC, 0)
        self._set(self.ipc_pub_pos, 4096)
        self._set(self.ipc_pub_lmt, 4096 + 65536)
        self._set(self.ipc_sub_pos, 1024)
        # UDP stream (both ends in this driver): session 22, stream 2002.
        self.udp_snd_pos = allocate_stream_counter(
            self.counters, SENDER_POSITION_NAME, SENDER_POSITION_TYPE_ID, 12, 22, 2002, UDP
        )
        self.udp_pub_pos = allocate_stream_counter(
            self.counters, PUBLISHER_POS_NAME, PUBLISHER_POS_TYPE_ID, 12, 22, 2002, UDP
        )
        self.udp_channel = allocate_channel_status(self.counters, RECEIVE_CHANNEL_STATUS_TYPE_ID, UDP)
        self.udp_rcv_hwm = allocate_stream_counter(
            self.counters, RECEIVER_HWM_NAME, RECEIVER_HWM_TYPE_ID, 13, 22, 2002, UDP
        )
        self.udp_rcv_pos = allocate_stream_counter(
            self.counters, RECEIVER_POS_NAME, RECEIVER_POS_TYPE_ID, 13, 22, 2002, UDP
        )
        self.udp_sub_a = allocate_subscriber_position(self.counters, 14, 22, 2002, UDP, 0)
        self.udp_sub_b = allocate_subscriber_position(self.counters, 15, 22, 2002, UDP, 0)
        for counter_id, value in (
            (self.udp_pub_pos, 10_000),
            (self.udp_snd_pos, 9_000),
            (self.udp_rcv_hwm, 8_800),
            (self.udp_rcv_pos, 8_500),
            (self.udp_sub_a, 8_000),
            (self.udp_sub_b, 7_000),
        ):
            self._set(counter_id, value)
        self.error_log = DistinctErrorLog(self.cnc.error_log_buffer, lambda: self.now_ms)
        self.error_log.record("io.aeron.exceptions.ConductorServiceTimeoutException: test error")
        self.loss_file = LossReportFile.create(directory, 64 * 1024)
        self.loss = LossReport(self.loss_file.buffer)
        entry = self.loss.create_entry(96, self.now_ms - 2000, 22, 2002, UDP, "/127.0.0.1:40786")
        assert entry is not None
        self.loss.record_observation(entry, 64, self.now_ms - 1000)
        if ready:
            self.cnc.signal_ready()

    def _set(self, counter_id: int, value: int) -> None:
        self.counters.values_buffer.put_long_ordered(counter_id * 128, value)

    def value(self, counter_id: int) -> int:
        return self.counters.get_counter_value(counter_id)

    def set_value(self, counter_id: int, value: int) -> None:
        self._set(counter_id, value)

    def close(self) -> None:
        self.loss_file.close()
        self.cnc.close()
