"""A driver conductor driven by hand for unit tests: a real cnc.dat and log files, a manual clock, no threads.

Commands go in through the to-driver ring as a client writes them; each :meth:`ConductorHarness.work` runs a
few duty cycles and returns the responses broadcast to clients as ``(type id, body)``.
"""

from __future__ import annotations

from pathlib import Path

from driver.clock import ManualClock
from driver.cnc import CncFile, CncGeneration
from driver.concurrent.broadcast import BroadcastReceiver, CopyBroadcastReceiver
from driver.concurrent.counters import CountersReader
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.config import DriverContext
from driver.core.conductor import DriverConductor

__all__ = ["MS", "ConductorHarness"]

MS = 1_000_000


class ConductorHarness:
    """``settings`` are DriverContext fields over small defaults (64 KiB IPC terms, 2 s client liveness, 100 ms
    timer); ``generation`` picks the CnC generation (None: the context's and the file's own defaults)."""

    def __init__(self, aeron_dir: Path, generation: CncGeneration | None = None, **settings: object) -> None:
        self.clock = ManualClock(1_000 * MS)
        fields: dict[str, object] = {
            "ipc_term_buffer_length": 64 * 1024,
            "client_liveness_timeout_ns": 2_000 * MS,
            "timer_interval_ns": 100 * MS,
            **settings,
        }
        if generation is not None:
            fields["cnc_generation"] = generation
        self.ctx = DriverContext.from_env({}, aeron_dir=aeron_dir, **fields).conclude()
        aeron_dir.mkdir()
        self.cnc = CncFile.create(
            aeron_dir,
            to_driver_length=self.ctx.conductor_buffer_length,
            to_clients_length=self.ctx.to_clients_buffer_length,
            counters_values_length=self.ctx.counters_values_buffer_length,
            error_log_length=self.ctx.error_buffer_length,
            client_liveness_timeout_ns=self.ctx.client_liveness_timeout_ns,
            start_timestamp_ms=0,
            pid=1,
            **({} if generation is None else {"generation": generation}),
        )
        self.conductor = DriverConductor(self.ctx, self.cnc, nano_clock=self.clock, epoch_clock=self.clock)
        self.terminated: list[bool] = []
        self.conductor.termination_hook = lambda: self.terminated.append(True)
        self.conductor.on_start()
        self.cnc.signal_ready()
        self.ring = ManyToOneRingBuffer(self.cnc.to_driver_buffer)
        self.receiver = CopyBroadcastReceiver(BroadcastReceiver(self.cnc.to_clients_buffer))
        self.counters = CountersReader(self.cnc.counters_metadata_buffer, self.cnc.counters_values_buffer)
        self.client_id = self.ring.next_correlation_id()

    def send_raw(self, command: int, body: bytes) -> None:
        assert self.ring.write(command, body)

    def cid(self) -> int:
        return self.ring.next_correlation_id()

    def pump(self, advance_ms: int = 0, cycles: int = 5) -> list[tuple[int, bytes]]:
        """Move the clock on, run ``cycles`` duty cycles, and collect what was broadcast to clients."""
        self.clock.advance_ms(advance_ms)
        for _ in range(cycles):
            self.conductor.do_work()
        out: list[tuple[int, bytes]] = []
        for _ in range(1000):
            if not self.receiver.receive(lambda type_id, body: out.append((type_id, bytes(body)))):
                break
        return out

    def work(self, advance_ms: int = 0, cycles: int = 5) -> list[tuple[int, bytes]]:
        """:meth:`pump`; a test may decode the responses here."""
        return self.pump(advance_ms, cycles)

    def run_for(self, total_ms: int, step_ms: int = 100) -> list[tuple[int, bytes]]:
        """Let ``total_ms`` pass with the driver running every ``step_ms`` (one big step would be a stall of
        the driver itself, which blames no client)."""
        out: list[tuple[int, bytes]] = []
        for _ in range(0, total_ms, step_ms):
            out += self.work(advance_ms=step_ms)
        return out

    def close(self) -> None:
        self.conductor.on_close()
        self.cnc.close()
