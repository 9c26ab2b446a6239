"""Buffered sessions' bookkeeping (endpoint.connection.session): numbering, acknowledgements, resuming and the
server's table, with bytes and a fake clock."""

from __future__ import annotations

import pytest

from endpoint.connection.session import (
    ACK,
    ACK_EVERY,
    DATA,
    FRAME_HEADER_LENGTH,
    SessionLog,
    SessionSync,
    SessionTable,
    ack_frame,
    data_frame,
    parse_frame,
)
from endpoint.errors import BudgetExceededError, SessionBufferFullError

S = 1_000_000_000


def log(**kwargs: int) -> SessionLog:
    return SessionLog(
        max_messages=kwargs.pop("max_messages", 100), max_bytes=kwargs.pop("max_bytes", 1 << 20), **kwargs
    )


def offer_all(sender: SessionLog) -> list[bytes]:
    """What a pump offers on the current connection, oldest first."""
    frames = []
    while (item := sender.next_to_offer()) is not None:
        seq, frame = item
        sender.mark_offered(seq)
        frames.append(frame)
    return frames


def receive(receiver: SessionLog, frames: list[bytes]) -> list[bytes]:
    """The bodies the receiver delivers, in order."""
    out = []
    for frame in frames:
        parsed = parse_frame(memoryview(frame))
        assert parsed is not None
        kind, seq, body = parsed
        assert kind == DATA
        if receiver.on_data(seq):
            out.append(bytes(body))
    return out


def connect(a: SessionLog, b: SessionLog) -> None:
    """A connection joins the session: a's sync goes in DONE, b answers with its own after applying it."""
    first = a.sync()
    b.resume(first, 0)
    a.resume(b.sync(), 0)


def test_frames_round_trip_and_reject_junk() -> None:
    frame = data_frame(7, b"hello")
    assert len(frame) == FRAME_HEADER_LENGTH + 5
    kind, seq, body = parse_frame(memoryview(frame))  # type: ignore[misc]
    assert (kind, seq, bytes(body)) == (DATA, 7, b"hello")
    kind, seq, body = parse_frame(memoryview(ack_frame(2**64 - 1)))  # type: ignore[misc]
    assert (kind, seq, len(body)) == (ACK, 2**64 - 1, 0)
    assert parse_frame(memoryview(frame[:-1])) is None  # length disagrees
    assert parse_frame(memoryview(frame[:10])) is None  # too short
    bad_kind = bytearray(frame)
    bad_kind[6] = 9
    assert parse_frame(memoryview(bad_kind)) is None
    assert parse_frame(memoryview(ack_frame(1) + b"x")) is None


def test_numbers_in_order_and_duplicates_dropped() -> None:
    sender, receiver = log(), log()
    connect(sender, receiver)
    frames = [sender.keep(b"m%d" % i) for i in range(5)]
    assert offer_all(sender) == frames
    assert receive(receiver, frames + frames[2:]) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert receiver.duplicates == 3
    assert receiver.delivered == 5
    assert receiver.gaps == 0


def test_ack_frees_kept_and_ack_policy() -> None:
    sender, receiver = log(), log()
    connect(sender, receiver)
    for _i in range(ACK_EVERY):
        sender.keep(b"x")
    receive(receiver, offer_all(sender)[: ACK_EVERY - 1])
    assert not receiver.ack_due(on_tick=False)
    assert receiver.ack_due(on_tick=True)
    receive(receiver, [sender._kept[-1][1]])
    assert receiver.ack_due(on_tick=False)
    assert sender.on_ack(receiver.acknowledged()) == ACK_EVERY
    assert sender.kept == 0
    assert sender.kept_bytes == 0
    assert not receiver.ack_due(on_tick=True)


def test_ack_beyond_what_was_offered_is_dropped() -> None:
    sender = log()
    sender.keep(b"a")
    assert sender.on_ack(1) == 0
    assert sender.bad_acks == 1
    assert sender.kept == 1


def test_bounds_raise_a_typed_error_and_keep_nothing() -> None:
    by_count = log(max_messages=2)
    by_count.keep(b"a")
    by_count.keep(b"b")
    with pytest.raises(SessionBufferFullError) as caught:
        by_count.keep(b"c")
    assert caught.value.budget == "max_buffered_messages"
    assert isinstance(caught.value, BudgetExceededError)
    assert by_count.kept == 2
    assert by_count.last_seq == 2
    assert by_count.refused == 1
    by_bytes = log(max_bytes=2 * (FRAME_HEADER_LENGTH + 10))
    by_bytes.keep(b"0123456789")
    with pytest.raises(SessionBufferFullError) as caught:
        by_bytes.keep(b"0123456789A")
    assert caught.value.budget == "max_buffered_bytes"
    by_bytes.keep(b"0123456789")  # exactly at the bound fits


def test_drop_mid_flight_resends_what_was_not_delivered_once_in_order() -> None:
    client, server = log(), log()
    connect(client, server)
    frames = [server.keep(b"s%d" % i) for i in range(6)]
    offered = offer_all(server)
    assert receive(client, offered[:2]) == [b"s0", b"s1"]  # acked on the wire...
    server.on_ack(client.acknowledged())
    assert receive(client, offered[2:4]) == [b"s2", b"s3"]  # ...delivered but the ack was lost with the link
    client.detach(1 * S)
    server.detach(1 * S)
    frames += [server.keep(b"while down %d" % i) for i in range(2)]  # kept while detached
    assert server.next_to_offer() is not None  # not offered anywhere yet
    connect(client, server)  # client's DONE says it delivered s3
    resend = offer_all(server)
    assert [parse_frame(memoryview(f))[1] for f in resend] == [5, 6, 7, 8]  # type: ignore[index]
    assert receive(client, resend) == [b"s4", b"s5", b"while down 0", b"while down 1"]
    assert client.duplicates == 0
    assert client.gaps == 0
    assert client.detached_ns is None


def test_resent_duplicates_are_dropped_when_the_sync_was_stale() -> None:
    """Frames delivered after the sync was taken (a late arrival on the old link) come again and are dropped."""
    client, server = log(), log()
    connect(client, server)
    frames = [server.keep(b"%d" % i) for i in range(3)]
    offer_all(server)
    stale = client.sync()  # says nothing delivered
    receive(client, frames)  # the old link delivers them after all
    server.resume(stale, 0)
    client.resume(server.sync(), 0)
    assert receive(client, offer_all(server)) == []
    assert client.duplicates == 3


def test_restarted_peer_starts_a_new_numbering() -> None:
    old_client, server = log(), log()
    connect(old_client, server)
    server_frames = [server.keep(b"%d" % i) for i in range(3)]
    receive(old_client, offer_all(server))
    server.on_ack(old_client.acknowledged())
    receive(server, [old_client.keep(b"c%d" % i) for i in range(4)])
    for _ in offer_all(old_client):
        pass
    server.detach(0)
    later = [server.keep(b"meanwhile %d" % i) for i in range(2)]
    new_client = log()  # the same key, a new process: a new incarnation
    connect(new_client, server)
    assert receive(new_client, offer_all(server)) == [b"meanwhile 0", b"meanwhile 1"]
    # The new process numbers from 1 again and is not taken for duplicates of the old one's 1..4.
    frame = new_client.keep(b"again")
    assert offer_all(new_client) == [frame]
    assert parse_frame(memoryview(frame))[1] == 1
    assert receive(server, [frame]) == [b"again"]
    assert server.delivered == 1
    assert server.peer_incarnation == new_client.incarnation
    assert server.duplicates == 0
    assert len(server_frames) + len(later) == 5


def test_restarted_server_takes_up_the_clients_numbering() -> None:
    client, old_server = log(), log()
    connect(client, old_server)
    receive(old_server, [client.keep(b"a")])
    offer_all(client)
    client.on_ack(old_server.acknowledged())
    client.detach(0)
    waiting = [client.keep(b"b"), client.keep(b"c")]
    new_server = log()
    connect(client, new_server)
    assert receive(new_server, offer_all(client)) == [b"b", b"c"]
    assert new_server.gaps == 0
    assert len(waiting) == 2


def test_sync_codec_rejects_malformed() -> None:
    sync = SessionSync(5, 1, 0, 0)
    assert SessionSync.from_list(sync.as_list()) == sync
    for bad in ([5, 1, 0], [5, 0, 0, 0], [0, 1, 0, 0], [5, 1, 0, -1], [5, 1, 0, 2**64], "x", [5, 1, 0, True]):
        assert SessionSync.from_list(bad) is None, bad


def test_expiry_with_a_fake_clock() -> None:
    session = log(now_ns=0)
    assert session.detached_ns == 0  # born without a connection
    session.resume(SessionSync(9, 1, 0, 0), 1 * S)
    assert not session.expired(100 * S, 10 * S)
    session.detach(20 * S)
    session.detach(25 * S)  # the first loss counts
    assert not session.expired(30 * S, 10 * S)
    assert session.expired(30 * S + 1, 10 * S)


def test_table_resumes_expires_evicts_and_refuses() -> None:
    table: SessionTable[str] = SessionTable(max_sessions=2, timeout_ns=10 * S)
    a, b = log(now_ns=0), log(now_ns=0)
    assert table.open(b"A", 0, "a", a) == ("a", False)
    assert table.open(b"A", 1, "other", log()) == ("a", True)
    a.resume(SessionSync(1, 1, 0, 0), 1)
    assert table.open(b"B", 2, "b", b) == ("b", False)
    b.resume(SessionSync(2, 1, 0, 0), 2)
    assert table.open(b"C", 3, "c", log(now_ns=3)) is None  # both connected: refused
    assert table.stats.refused == 1
    a.detach(5 * S)
    c = log(now_ns=6 * S)
    assert table.open(b"C", 6 * S, "c", c) == ("c", False)  # a (detached) gives way
    c.resume(SessionSync(3, 1, 0, 0), 6 * S)
    assert table.evicted == ["a"]
    assert table.stats.evicted == 1
    assert table.get(b"A") is None
    b.detach(7 * S)
    assert table.expire(17 * S) == []
    assert table.expire(17 * S + 1) == ["b"]
    assert table.stats.expired == 1
    assert table.close(b"C") == "c"
    assert table.close(b"C") is None
    assert len(table) == 0
    assert table.stats.opened == 3
    assert table.stats.resumed == 1
    assert table.stats.closed == 1
