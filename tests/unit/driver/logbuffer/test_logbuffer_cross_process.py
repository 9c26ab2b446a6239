from __future__ import annotations

import itertools
import mmap
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from logbuffer_cross_worker import GO_OFFSET, READY_OFFSET, run_writer
from logbuffer_helpers import MiniPublication, MiniSubscriber, check_message

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import descriptor as d
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import Header
from driver.logbuffer.log_buffers import LogBuffers
from driver.logbuffer.unblocker import LogBufferUnblocker

TL = 64 * 1024
PER_WRITER = 6000
TIMEOUT_S = 90.0
STUCK_S = 2.0


@pytest.mark.process
def test_two_processes_append_while_parent_reads(tmp_path: Path) -> None:
    log_path = tmp_path / "shared.logbuffer"
    limit_path = tmp_path / "limit.dat"
    limit_path.write_bytes(bytes(4096))
    log = LogBuffers.create(log_path, TL, 4096)
    initial_term_id = 2**31 - 5  # term ids wrap past int32 max during the run
    d.initialize_publication_metadata(
        log.metadata, session_id=17, stream_id=1, initial_term_id=initial_term_id, mtu_length=256,
        term_length=TL, page_size=4096, correlation_id=1,
    )
    fd = os.open(limit_path, os.O_RDWR)
    limit_map = mmap.mmap(fd, 4096)
    os.close(fd)
    limit = AtomicBuffer(limit_map)
    limit.put_long_ordered(0, TL // 2)

    received: dict[int, list[int]] = {0: [], 1: []}
    order: list[int] = []

    def on_message(payload: memoryview, _header: Header) -> None:
        writer, sequence = check_message(payload)
        received[writer].append(sequence)
        order.append(writer)

    assembler = FragmentAssembler(on_message)
    subscriber = MiniSubscriber(log.terms, log.term_views, log.metadata)
    tail = MiniPublication(log.terms, log.term_views, log.metadata)
    ctx = multiprocessing.get_context("spawn")
    writers = [
        ctx.Process(
            target=run_writer, args=(str(log_path), str(limit_path), w, PER_WRITER, 1234 + w, TIMEOUT_S)
        )
        for w in (0, 1)
    ]
    for p in writers:
        p.start()
    unblocks = 0
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not all(limit.get_long_volatile(READY_OFFSET + 8 * w) == 1 for w in (0, 1)):
            assert time.monotonic() < deadline, "writers never became ready"
            assert all(p.exitcode is None for p in writers), "a writer exited early"
            time.sleep(0.005)
        limit.put_long_ordered(GO_OFFSET, 1)
        last_progress = time.monotonic()
        while len(received[0]) + len(received[1]) < 2 * PER_WRITER:
            now = time.monotonic()
            assert now < deadline, f"timed out: {len(received[0])}, {len(received[1])} received"
            before = subscriber.position
            subscriber.poll(assembler, 256)
            if subscriber.position != before:
                limit.put_long_ordered(0, subscriber.position + TL // 2)
                last_progress = now
                continue
            if any(p.exitcode not in (None, 0) for p in writers):
                pytest.fail(f"writer failed: {[p.exitcode for p in writers]}")
            if now - last_progress > STUCK_S and tail.position > subscriber.position:
                # A writer's claim was lost (see run_writer); pad over it as the driver would.
                if LogBufferUnblocker.unblock(log.terms, log.metadata, subscriber.position, TL):
                    unblocks += 1
                last_progress = now
            os.sched_yield()
        for p in writers:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            assert p.exitcode == 0
    finally:
        for p in writers:
            if p.is_alive():
                p.terminate()
                p.join(5)
        limit.release()
        limit_map.close()
        log.close()

    assert received[0] == list(range(PER_WRITER))
    assert received[1] == list(range(PER_WRITER))
    terms = subscriber.position >> 16
    assert terms >= 10, f"only {terms} term rotations"
    assert d.compute_term_id_from_position(subscriber.position, 16, initial_term_id) < 0  # wrapped
    switches = sum(1 for a, b in itertools.pairwise(order) if a != b)
    assert switches >= 10, f"writers barely overlapped ({switches} switches)"
    print(f"terms={terms} unblocks={unblocks} switches={switches}")
