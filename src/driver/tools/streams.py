"""``streams``: per stream the positions along its path and the lag between them (StreamStat, with lags).

A stream is (channel, stream id, session id). Its position counters, by stage:

    publisher   pub-pos (how far publishers have written), pub-lmt (how far they may)
    sender      snd-pos (sent), snd-lmt (flow control's limit)
    receiver    rcv-hwm (highest byte seen), rcv-pos (rebuilt without gaps)
    subscriber  sub-pos, one per subscription

Each lag is an upstream position minus a downstream one, for stages this driver
has: publisher→sender, sender→receiver (both ends in one driver only),
receiver→subscriber, and end to end the first stage present minus the slowest
subscriber. An IPC stream has no sender or receiver, so its lag is publisher
minus slowest subscriber.

A spy (an ``aeron-spy:`` subscription) reads a UDP publication of this driver
in place: its sub-pos counter names the spy channel, and is shown with the
publication it reads (the one of its stream and session: session ids are unique
among a driver's publications), with the lag publisher→spy. Java's StreamStat
groups by channel text, so its format (``read_streams(..., join_spies=False)``)
keeps a spy as a stream of its own.
"""

from __future__ import annotations

import json

import attrs

from driver.concurrent.counters import CountersReader
from driver.concurrent.system_counters import (
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_TYPE_ID,
    RECEIVER_HWM_TYPE_ID,
    RECEIVER_POS_TYPE_ID,
    SENDER_LIMIT_TYPE_ID,
    SENDER_POSITION_TYPE_ID,
    SUBSCRIBER_POSITION_TYPE_ID,
    stream_counter_name,
)
from driver.tools.stat import STREAM_TYPE_IDS, CounterSample, read_counters
from driver.uri import SPY_PREFIX

__all__ = ["StreamPositions", "format_streams", "format_streamstat", "read_streams", "streams_json"]


@attrs.define
class StreamPositions:
    channel: str
    stream_id: int
    session_id: int
    publisher: int | None = None
    publisher_limit: int | None = None
    sender: int | None = None
    sender_limit: int | None = None
    receiver_hwm: int | None = None
    receiver: int | None = None
    subscribers: dict[int, int] = attrs.field(factory=dict)  # subscription registration id -> sub-pos
    counters: list[CounterSample] = attrs.field(factory=list)
    spies: dict[int, int] = attrs.field(factory=dict)  # spy subscription registration id -> its sub-pos

    @property
    def slowest_subscriber(self) -> int | None:
        return min(self.subscribers.values()) if self.subscribers else None

    @property
    def slowest_spy(self) -> int | None:
        return min(self.spies.values()) if self.spies else None

    def lags(self) -> dict[str, int]:
        """Named lags in bytes between the stages this driver has counters for."""
        result: dict[str, int] = {}
        slowest = self.slowest_subscriber
        if self.publisher is not None and self.sender is not None:
            result["publisher_to_sender"] = self.publisher - self.sender
        if self.sender is not None and self.receiver is not None:
            result["sender_to_receiver"] = self.sender - self.receiver
        if self.receiver_hwm is not None and self.receiver is not None:
            result["receiver_hwm_to_receiver"] = self.receiver_hwm - self.receiver
        if self.receiver is not None and slowest is not None:
            result["receiver_to_subscriber"] = self.receiver - slowest
        head = next((p for p in (self.publisher, self.sender, self.receiver) if p is not None), None)
        if head is not None and slowest is not None:
            result["end_to_end"] = head - slowest
        slowest_spy = self.slowest_spy
        if self.publisher is not None and slowest_spy is not None:
            result["publisher_to_spy"] = self.publisher - slowest_spy
        return result


_FIELD_BY_TYPE = {
    PUBLISHER_POS_TYPE_ID: "publisher",
    PUBLISHER_LIMIT_TYPE_ID: "publisher_limit",
    SENDER_POSITION_TYPE_ID: "sender",
    SENDER_LIMIT_TYPE_ID: "sender_limit",
    RECEIVER_HWM_TYPE_ID: "receiver_hwm",
    RECEIVER_POS_TYPE_ID: "receiver",
}


def read_streams(reader: CountersReader, *, join_spies: bool = True) -> list[StreamPositions]:
    """Streams in the order their first counter appears; ``join_spies``: each spy with the publication it reads
    (else a spy is a stream of its own channel, as StreamStat shows it)."""
    streams: dict[tuple[str, int, int], StreamPositions] = {}
    spies: list[CounterSample] = []
    for sample in read_counters(reader):
        if sample.type_id not in STREAM_TYPE_IDS:
            continue
        assert sample.channel is not None
        assert sample.stream_id is not None
        assert sample.session_id is not None
        if join_spies and sample.type_id == SUBSCRIBER_POSITION_TYPE_ID and sample.channel.startswith(SPY_PREFIX):
            spies.append(sample)
            continue
        stream = _stream(streams, sample.channel, sample.stream_id, sample.session_id)
        stream.counters.append(sample)
        if sample.type_id == SUBSCRIBER_POSITION_TYPE_ID:
            assert sample.registration_id is not None
            stream.subscribers[sample.registration_id] = sample.value
        elif sample.type_id in _FIELD_BY_TYPE:
            setattr(stream, _FIELD_BY_TYPE[sample.type_id], sample.value)
    for sample in spies:
        assert sample.channel is not None
        assert sample.stream_id is not None
        assert sample.session_id is not None
        assert sample.registration_id is not None
        spied = next(
            (
                s
                for s in streams.values()
                if s.stream_id == sample.stream_id and s.session_id == sample.session_id and s.sender is not None
            ),
            None,
        )
        stream = spied or _stream(streams, sample.channel, sample.stream_id, sample.session_id)
        stream.counters.append(sample)
        stream.spies[sample.registration_id] = sample.value
    return list(streams.values())


def _stream(
    streams: dict[tuple[str, int, int], StreamPositions], channel: str, stream_id: int, session_id: int
) -> StreamPositions:
    key = (channel, stream_id, session_id)
    stream = streams.get(key)
    if stream is None:
        stream = streams[key] = StreamPositions(channel, stream_id, session_id)
    return stream


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def format_streams(streams: list[StreamPositions]) -> str:
    if not streams:
        return "no streams\n"
    lines: list[str] = []
    for s in streams:
        lines.append(f"{s.channel}  stream {s.stream_id}  session {s.session_id}")
        if s.publisher is not None or s.publisher_limit is not None:
            lines.append(f"  publisher   pub-pos {_num(s.publisher):>20}   pub-lmt {_num(s.publisher_limit):>20}")
        if s.sender is not None or s.sender_limit is not None:
            lines.append(f"  sender      snd-pos {_num(s.sender):>20}   snd-lmt {_num(s.sender_limit):>20}")
        if s.receiver is not None or s.receiver_hwm is not None:
            lines.append(f"  receiver    rcv-pos {_num(s.receiver):>20}   rcv-hwm {_num(s.receiver_hwm):>20}")
        for registration_id, position in s.subscribers.items():
            lines.append(f"  subscriber  sub-pos {_num(position):>20}   subscription {registration_id}")
        for registration_id, position in s.spies.items():
            lines.append(f"  spy         sub-pos {_num(position):>20}   subscription {registration_id}")
        lags = s.lags()
        if lags:
            described = ", ".join(f"{name.replace('_', ' ')} {value:,}" for name, value in lags.items())
            lines.append(f"  lag         {described}")
        lines.append("")
    return "\n".join(lines)


def format_streamstat(streams: list[StreamPositions]) -> str:
    """Java StreamStat's lines: ``sessionId=.. streamId=.. channel=.. : name:registrationId:value ...``."""
    lines = []
    for s in streams:
        parts = [f"sessionId={s.session_id} streamId={s.stream_id} channel={s.channel} :"]
        parts.extend(f"{stream_counter_name(c.type_id)}:{c.registration_id}:{c.value}" for c in s.counters)
        lines.append(" ".join(parts))
    return "".join(f"{line}\n" for line in lines)


def streams_json(streams: list[StreamPositions]) -> str:
    data = [
        {
            "channel": s.channel,
            "stream_id": s.stream_id,
            "session_id": s.session_id,
            "publisher_position": s.publisher,
            "publisher_limit": s.publisher_limit,
            "sender_position": s.sender,
            "sender_limit": s.sender_limit,
            "receiver_hwm": s.receiver_hwm,
            "receiver_position": s.receiver,
            "subscriber_positions": {str(k): v for k, v in s.subscribers.items()},
            "spy_positions": {str(k): v for k, v in s.spies.items()},
            "lags": s.lags(),
        }
        for s in streams
    ]
    return json.dumps({"streams": data}, indent=2) + "\n"
