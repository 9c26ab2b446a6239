"""The archive's messages through the SBE flyweights (driver.sbe over Aeron's schema) beside the msgpack protocol
the archive speaks today (driver.archive.protocol), in one process.

    python benchmarks/sbe_codec.py [--rounds 100000] [--repeat 7] [--quick]

Rows: a ``ReplayRequest`` (6 fields and a channel), a ``RecordingDescriptor`` (13 fields and three strings), an
OK ``ControlResponse`` and a ``RecordingProgress`` event; the first two also with all fixed fields in one call
(``write_fields``/``read_fields``: one ``pack_into``/``unpack_from`` over the block). Encode means: the sender's
reused encoder wrapped with its header over a reused buffer, every field set, var data put (SBE); the message
built and packed (msgpack). Decode means: the header read and dispatched, every field and string read into Python
values (SBE, with the reused dispatcher); unpacked and validated into the archive's Request/Response/RecordingEvent
(msgpack). Each figure is the best of ``--repeat`` timings of ``--rounds`` calls, in ns per message; the last
column is SBE's encode + decode over msgpack's.
"""

from __future__ import annotations

import argparse
import functools
import sys
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table

from driver.archive import protocol
from driver.archive.catalog import RecordingDescriptor
from driver.archive.codecs import LEGACY, ArchiveDispatcher

CHANNEL = "aeron:udp?endpoint=localhost:40123|term-length=65536"


def best_ns(fn: Callable[[], object], rounds: int, repeat: int) -> float:
    return min(timeit.Timer(fn).repeat(repeat, rounds)) / rounds * 1e9


def sbe_cases() -> list[tuple[str, Callable[[], int], Callable[[], object]]]:
    buffer = bytearray(4096)
    dispatcher = ArchiveDispatcher()
    view = memoryview(buffer)

    replay = LEGACY["ReplayRequest"].encoder()

    def encode_replay() -> int:
        e = replay.wrap_and_apply_header(buffer, 0)
        e.control_session_id = 7
        e.correlation_id = 1234
        e.recording_id = 3
        e.position = 0
        e.length = -1
        e.replay_stream_id = 1001
        e.put_replay_channel(CHANNEL)
        return 8 + e.encoded_length

    def decode_replay() -> object:
        d = dispatcher.wrap(view, 0)
        return (
            d.control_session_id,
            d.correlation_id,
            d.recording_id,
            d.position,
            d.length,
            d.replay_stream_id,
            d.replay_channel(),
        )

    descriptor = LEGACY["RecordingDescriptor"].encoder()

    def encode_descriptor() -> int:
        e = descriptor.wrap_and_apply_header(buffer, 0)
        e.control_session_id = 7
        e.correlation_id = 1234
        e.recording_id = 3
        e.start_timestamp = 1_764_000_000_000
        e.stop_timestamp = 1_764_000_100_000
        e.start_position = 0
        e.stop_position = 123_456_789
        e.initial_term_id = 17
        e.segment_file_length = 128 << 20
        e.term_buffer_length = 64 << 10
        e.mtu_length = 1408
        e.session_id = -12345
        e.stream_id = 1001
        e.put_stripped_channel("aeron:udp?endpoint=localhost:40123")
        e.put_original_channel(CHANNEL)
        e.put_source_identity("127.0.0.1:55123")
        return 8 + e.encoded_length

    def decode_descriptor() -> object:
        d = dispatcher.wrap(view, 0)
        return (
            d.control_session_id,
            d.correlation_id,
            d.recording_id,
            d.start_timestamp,
            d.stop_timestamp,
            d.start_position,
            d.stop_position,
            d.initial_term_id,
            d.segment_file_length,
            d.term_buffer_length,
            d.mtu_length,
            d.session_id,
            d.stream_id,
            d.stripped_channel(),
            d.original_channel(),
            d.source_identity(),
        )

    def encode_replay_bulk() -> int:
        e = replay.wrap_and_apply_header(buffer, 0).write_fields(7, 1234, 3, 0, -1, 1001)
        e.put_replay_channel(CHANNEL)
        return 8 + e.encoded_length

    def decode_replay_bulk() -> object:
        d = dispatcher.wrap(view, 0)
        return d.read_fields(), d.replay_channel()

    def encode_descriptor_bulk() -> int:
        e = descriptor.wrap_and_apply_header(buffer, 0).write_fields(
            7,
            1234,
            3,
            1_764_000_000_000,
            1_764_000_100_000,
            0,
            123_456_789,
            17,
            128 << 20,
            64 << 10,
            1408,
            -12345,
            1001,
        )
        e.put_stripped_channel("aeron:udp?endpoint=localhost:40123")
        e.put_original_channel(CHANNEL)
        e.put_source_identity("127.0.0.1:55123")
        return 8 + e.encoded_length

    def decode_descriptor_bulk() -> object:
        d = dispatcher.wrap(view, 0)
        return d.read_fields(), d.stripped_channel(), d.original_channel(), d.source_identity()

    response = LEGACY["ControlResponse"].encoder()

    def encode_response() -> int:
        e = response.wrap_and_apply_header(buffer, 0)
        e.control_session_id = 7
        e.correlation_id = 1234
        e.relevant_id = 3
        e.code = 0
        e.put_error_message("")
        return 8 + e.encoded_length

    def decode_response() -> object:
        d = dispatcher.wrap(view, 0)
        return (d.control_session_id, d.correlation_id, d.relevant_id, d.code, d.error_message())

    progress = LEGACY["RecordingProgress"].encoder()

    def encode_progress() -> int:
        e = progress.wrap_and_apply_header(buffer, 0)
        e.recording_id = 3
        e.start_position = 0
        e.position = 123_456_789
        return 8 + e.encoded_length

    def decode_progress() -> object:
        d = dispatcher.wrap(view, 0)
        return (d.recording_id, d.start_position, d.position)

    return [
        ("ReplayRequest", encode_replay, decode_replay),
        ("ReplayRequest, *_fields()", encode_replay_bulk, decode_replay_bulk),
        ("RecordingDescriptor", encode_descriptor, decode_descriptor),
        ("RecordingDescriptor, *_fields()", encode_descriptor_bulk, decode_descriptor_bulk),
        ("ControlResponse (OK)", encode_response, decode_response),
        ("RecordingProgress", encode_progress, decode_progress),
    ]


def msgpack_cases() -> list[tuple[Callable[[], bytes], Callable[[bytes], object]]]:
    desc = RecordingDescriptor(
        3,
        1_764_000_000_000,
        1_764_000_100_000,
        0,
        123_456_789,
        123_456_789,
        17,
        128 << 20,
        64 << 10,
        1408,
        -12345,
        1001,
        "aeron:udp?endpoint=localhost:40123",
        CHANNEL,
        "127.0.0.1:55123",
    )
    event = protocol.RecordingEvent("progress", 3, 0, 123_456_789)
    return [
        (lambda: protocol.encode_request(1234, 7, "replay", 3, 0, -1, CHANNEL, 1001), protocol.decode_request),
        (lambda: protocol.encode_request(1234, 7, "replay", 3, 0, -1, CHANNEL, 1001), protocol.decode_request),
        (lambda: protocol.encode_response(1234, desc.to_dict()), protocol.decode_response),
        (lambda: protocol.encode_response(1234, desc.to_dict()), protocol.decode_response),
        (lambda: protocol.encode_response(1234, 3), protocol.decode_response),
        (lambda: protocol.encode_event(event), protocol.decode_event),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="smoke run: 5,000 calls, best of 3")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.repeat = 5_000, 3
    rows: list[Sequence[Any]] = []
    for (name, sbe_encode, sbe_decode), (mp_encode, mp_decode) in zip(sbe_cases(), msgpack_cases(), strict=True):
        length = sbe_encode()
        sbe_decode()  # the buffer now holds this message; decoding it does not change it
        data = mp_encode()
        mp_decode(data)
        enc = best_ns(sbe_encode, args.rounds, args.repeat)
        dec = best_ns(sbe_decode, args.rounds, args.repeat)
        mp_enc = best_ns(mp_encode, args.rounds, args.repeat)
        mp_dec = best_ns(functools.partial(mp_decode, data), args.rounds, args.repeat)
        rows.append((name, length, len(data), enc, dec, mp_enc, mp_dec, (enc + dec) / (mp_enc + mp_dec)))
    print_table(
        f"Archive messages, SBE flyweights vs the msgpack protocol, best of {args.repeat} x {args.rounds:,}, ns/msg",
        ["message", "SBE bytes", "msgpack bytes", "SBE enc", "SBE dec", "msgpack enc", "msgpack dec", "SBE/msgpack"],
        rows,
    )


if __name__ == "__main__":
    main()
