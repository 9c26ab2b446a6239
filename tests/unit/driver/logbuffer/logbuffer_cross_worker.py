"""Writer process for the cross-process log buffer test (imported by spawn children)."""

from __future__ import annotations

import mmap
import os
import random
import time

from logbuffer_helpers import MiniPublication, make_message

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import DriverError
from driver.logbuffer.log_buffers import LogBuffers

GO_OFFSET = 8
READY_OFFSET = 64


def run_writer(log_path: str, limit_path: str, writer: int, count: int, seed: int, timeout_s: float) -> None:
    """Append ``count`` self-checking messages (single, batched and fragmented) as writer ``writer``."""
    log = LogBuffers.map(log_path)
    fd = os.open(limit_path, os.O_RDWR)
    limit_map = mmap.mmap(fd, 4096)
    os.close(fd)
    limit = AtomicBuffer(limit_map)
    publication = MiniPublication(log.terms, log.term_views, log.metadata, limit)
    rng = random.Random(seed)
    deadline = time.monotonic() + timeout_s
    # Start together so the writers really overlap: say ready, wait for the go flag.
    limit.put_long_ordered(READY_OFFSET + 8 * writer, 1)
    while limit.get_long_volatile(GO_OFFSET) != 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"writer {writer} never got the go flag")
        time.sleep(0.001)
    sequence = 0
    pending: list[bytes] = []
    delayed = 0
    while sequence < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"writer {writer} stuck at {sequence}/{count}")
        if not pending:
            kind = rng.random()
            if kind < 0.4:
                n = min(rng.randint(2, 8), count - sequence)
                pending = [make_message(writer, sequence + i, rng.randint(16, 200)) for i in range(n)]
            elif kind < 0.9:
                pending = [make_message(writer, sequence, rng.randint(16, 200))]
            else:
                pending = [make_message(writer, sequence, rng.randint(300, 1500))]  # fragmented at mtu 256
        try:
            result = publication.offer_batch(pending) if len(pending) > 1 else publication.offer(pending[0])
        except DriverError:
            delayed += 1  # claim landed in a later term ("action possibly delayed"): retry
            continue
        if result > 0:
            sequence += len(pending)
            pending = []
        else:
            os.sched_yield()
    limit.release()
    limit_map.close()
    log.close()
