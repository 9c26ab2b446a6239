"""A publication's producer position, written out for the conductor's timer, is what the log buffer
descriptor's own functions make of the active partition's raw tail: term ids that wrap, offsets past the end
of a term (fetch-adds overshoot), every partition."""

from __future__ import annotations

import random
from types import SimpleNamespace

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.core.driver_publication import DriverPublication
from driver.logbuffer import descriptor as lbd


def test_the_written_out_producer_position_agrees_with_the_descriptor() -> None:
    rng = random.Random(19)
    for _ in range(3000):
        metadata = AtomicBuffer(bytearray(lbd.LOG_META_DATA_LENGTH))
        bits = rng.choice([16, 20, 26, 30])
        term_length = 1 << bits
        initial_term_id = rng.randint(-(2**31), 2**31 - 1)
        term_count = rng.randint(0, 10**6)
        lbd.set_active_term_count(metadata, term_count)
        term_id = rng.randint(-(2**31), 2**31 - 1)
        offset = rng.choice([0, rng.randint(0, term_length), term_length + rng.randint(1, 5000)])
        raw_tail = (term_id << 32) | offset
        lbd.set_raw_tail_volatile(metadata, term_count % lbd.PARTITION_COUNT, raw_tail)
        publication = SimpleNamespace(
            log=SimpleNamespace(metadata=metadata),
            initial_term_id=initial_term_id,
            position_bits=bits,
            term_length=term_length,
        )
        expected = lbd.compute_position(
            lbd.term_id(raw_tail), lbd.term_offset(raw_tail, term_length), bits, initial_term_id
        )
        assert DriverPublication.producer_position(publication) == expected  # type: ignore[arg-type]
