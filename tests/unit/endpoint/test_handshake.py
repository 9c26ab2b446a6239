"""Handshake codecs and state machines: happy path, every counted drop, floods, retries and eavesdroppers."""

from __future__ import annotations

from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoint.errors import ConfigurationError, RejectReason
from endpoint.handshake import (
    MAGIC,
    MAX_PACKET_LENGTH,
    MAX_TEXT_LENGTH,
    PROTOCOL_VERSION,
    Accepted,
    ClientHandshake,
    Completed,
    Done,
    HandshakeStats,
    Hello,
    Kind,
    Rejected,
    ServerHandshake,
    answer_key,
    unsealed_reject,
)

T0 = 1_700_000_000 * 1_000_000_000  # epoch ns
MS = 1_000_000
SEC = 1_000_000_000
TIMEOUT = 10 * SEC
WINDOW = 30 * SEC
REG = bytes(range(32))
REPLY: dict[str, int | str] = {"stream": 7, "port": 40123, "host": "10.0.0.2"}


def make_server(**overrides: Any) -> ServerHandshake:
    options: dict[str, Any] = {
        "handshake_timeout_ns": TIMEOUT,
        "replay_window_ns": WINDOW,
        "max_pending": 16,
        "max_pending_per_source": 4,
    }
    options.update(overrides)
    return ServerHandshake(X25519PrivateKey.generate(), **options)


def make_client(**overrides: Any) -> ClientHandshake:
    options: dict[str, Any] = {"registration_hash": REG, "reply": REPLY, "tag": "game"}
    options.update(overrides)
    return ClientHandshake(**options)


def grant_for(connection_id: int) -> dict[str, int | str | bytes | bool]:
    return {"connection_id": connection_id, "session_pub": 11, "stream_sub": 12, "buffered": True, "blob": b"\x00\x01"}


def counts(stats: HandshakeStats) -> dict[str, int]:
    return {
        name: value
        for name, value in {
            "malformed": stats.malformed,
            "replayed": stats.replayed,
            "spoofed": stats.spoofed,
            "unknown": stats.unknown,
            "expired": stats.expired,
            "overloaded": stats.overloaded,
        }.items()
        if value
    }


def spec_key(private: X25519PrivateKey, peer: bytes, client_pub: bytes, server_pub: bytes, connect_key: int) -> AESGCM:
    """The key derivation as the protocol describes it, written independently of the module."""
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer))
    info = b"endpoint-handshake-v1" + client_pub + server_pub + connect_key.to_bytes(8, "little")
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared))


def aad(kind: int, connect_key: int) -> bytes:
    return MAGIC.to_bytes(2, "little") + bytes([kind]) + connect_key.to_bytes(8, "little")


def handshake_until_done(
    server: ServerHandshake, client: ClientHandshake, source: str = "10.0.0.2:40123", connection_id: int = 77
) -> bytes:
    """Runs HELLO .. DONE; returns the DONE_ACK the server would send."""
    hello = server.receive(client.hello(T0), source, T0)
    assert isinstance(hello, Hello)
    assert isinstance(client.receive(server.accept(client.connect_key, grant_for(connection_id), T0)), Accepted)
    assert server.receive(client.done(), source, T0) == Done(client.connect_key, connection_id)
    return server.complete(client.connect_key)


# ---------------------------------------------------------------------------------------------------- happy paths


def test_answer_key_names_the_handshake_of_every_answer_and_nothing_else() -> None:
    server, client = make_server(), make_client()
    hello = client.hello(T0)
    server.receive(hello, "10.0.0.2:40123", T0)
    ack = server.accept(client.connect_key, grant_for(5), T0)
    client.receive(ack)
    server.receive(client.done(), "10.0.0.2:40123", T0)
    for answer in (
        ack,
        server.complete(client.connect_key),
        unsealed_reject(client.connect_key, RejectReason.SERVER_FULL, "x"),
    ):
        assert answer_key(answer) == client.connect_key
        assert answer_key(memoryview(answer)) == client.connect_key
    for junk in (
        hello,
        client.done(),
        b"",
        b"\xc1",
        msgpack.packb([1, 2, 3]),
        msgpack.packb([MAGIC, 2, "key"]),
        bytes(MAX_PACKET_LENGTH + 1),
    ):
        assert answer_key(junk) is None


def test_full_handshake() -> None:
    server, client = make_server(), make_client()
    hello = server.receive(client.hello(T0), "10.0.0.2:40123", T0)
    assert hello == Hello(
        connect_key=client.connect_key,
        client_public=client.public_key,
        registration_hash=REG,
        reply=REPLY,
        tag="game",
        source="10.0.0.2:40123",
        protocol_version=PROTOCOL_VERSION,
    )
    assert server.pending_count() == 1
    assert server.last_reply(client.connect_key) is None

    ack = server.accept(client.connect_key, grant_for(77), T0)
    assert server.last_reply(client.connect_key) == ack
    accepted = client.receive(ack)
    assert accepted == Accepted(server_public=server.public_key, grant=grant_for(77))
    assert client.server_public == server.public_key
    assert client.connection_id == 77
    assert client.state == "accepted"

    done = server.receive(client.done(), "10.0.0.2:40123", T0 + 1)
    assert done == Done(connect_key=client.connect_key, connection_id=77)
    assert client.receive(server.complete(client.connect_key)) == Completed(77)
    assert client.state == "completed"
    assert server.pending_count() == 0
    assert counts(server.stats) == {}
    assert counts(client.stats) == {}
    assert server.stats.received == 2
    assert client.stats.received == 2


def test_pinned_server_key_that_matches_is_accepted() -> None:
    server = make_server()
    client = make_client(expected_server_key=server.public_key)
    server.receive(client.hello(T0), "a", T0)
    assert isinstance(client.receive(server.accept(client.connect_key, grant_for(1), T0)), Accepted)


def test_changed_server_key_is_rejected_on_the_client() -> None:
    server = make_server()
    client = make_client(expected_server_key=X25519PrivateKey.generate().public_key().public_bytes_raw())
    server.receive(client.hello(T0), "a", T0)
    result = client.receive(server.accept(client.connect_key, grant_for(1), T0))
    assert isinstance(result, Rejected)
    assert result.reason is RejectReason.SERVER_KEY_CHANGED
    assert result.authenticated
    assert server.public_key.hex() in result.text
    assert client.state == "rejected"
    with pytest.raises(RuntimeError):
        client.done()


def test_given_keys_and_connect_key_are_used() -> None:
    private = X25519PrivateKey.generate()
    client = make_client(private_key=private, connect_key=0xDEADBEEF)
    assert client.connect_key == 0xDEADBEEF
    assert client.public_key == private.public_key().public_bytes_raw()
    fields = msgpack.unpackb(client.hello(T0 + 5 * MS))
    assert fields == [MAGIC, 1, PROTOCOL_VERSION, 0xDEADBEEF, client.public_key, REG, REPLY, "game", T0 // MS + 5]


def test_random_connect_keys_are_nonzero_u64_and_differ() -> None:
    keys = {make_client().connect_key for _ in range(20)}
    assert len(keys) == 20
    assert all(0 < key < 1 << 64 for key in keys)


def test_other_protocol_version_reaches_the_glue_which_rejects_it() -> None:
    server = make_server()
    client = make_client(protocol_version=PROTOCOL_VERSION + 1)
    hello = server.receive(client.hello(T0), "a", T0)
    assert isinstance(hello, Hello)
    assert hello.protocol_version == PROTOCOL_VERSION + 1
    result = client.receive(server.reject(client.connect_key, RejectReason.VERSION_MISMATCH, "want 1"))
    assert result == Rejected(RejectReason.VERSION_MISMATCH, "want 1", authenticated=True)
    assert server.pending_count() == 0


# ---------------------------------------------------------------------------------------------------- eavesdropper


def test_eavesdropper_with_every_packet_cannot_open_anything() -> None:
    client_private = X25519PrivateKey.generate()
    server, client = make_server(), make_client(private_key=client_private)
    wire: list[bytes] = [client.hello(T0)]
    server.receive(wire[0], "a", T0)
    wire.append(server.accept(client.connect_key, grant_for(4242), T0))
    client.receive(wire[1])
    wire.append(client.done())
    server.receive(wire[2], "a", T0)
    wire.append(server.complete(client.connect_key))
    assert isinstance(client.receive(wire[3]), Completed)

    hello_ack = msgpack.unpackb(wire[1])
    key = client.connect_key
    client_pub, server_pub = client.public_key, hello_ack[3]
    # The client's real key (derived as specified) opens the grant ...
    real = spec_key(client_private, server_pub, client_pub, server_pub, key)
    assert msgpack.unpackb(real.decrypt(hello_ack[4], hello_ack[5], aad(Kind.HELLO_ACK, key)))["connection_id"] == 4242
    # ... a third key pair can't, whichever public key it pairs with.
    eve = X25519PrivateKey.generate()
    for peer in (server_pub, client_pub):
        guess = spec_key(eve, peer, client_pub, server_pub, key)
        with pytest.raises(InvalidTag):
            guess.decrypt(hello_ack[4], hello_ack[5], aad(Kind.HELLO_ACK, key))
        for packet, kind in ((wire[2], Kind.DONE), (wire[3], Kind.DONE_ACK)):
            fields = msgpack.unpackb(packet)
            with pytest.raises(InvalidTag):
                guess.decrypt(fields[3], fields[4], aad(kind, key))


def test_sealed_payload_cannot_be_moved_to_another_message_kind() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    client.receive(server.accept(client.connect_key, grant_for(5), T0))
    done = msgpack.unpackb(client.done())
    # Reflect the client's own DONE back as a DONE_ACK: same key, same payload shape, other kind.
    assert client.receive(msgpack.packb([MAGIC, Kind.DONE_ACK, *done[2:]])) is None
    assert counts(client.stats) == {"spoofed": 1}


# ---------------------------------------------------------------------------------------------------- server drops


def test_malformed_packets_are_counted() -> None:
    server, client = make_server(), make_client()
    hello = client.hello(T0)
    fields = msgpack.unpackb(hello)
    bad = [
        b"",
        b"\xc1",  # never-used msgpack byte
        hello[:-3],  # truncated
        hello + b"\x00",  # trailing data
        msgpack.packb([0xE9D1, *fields[1:]]),  # wrong magic
        msgpack.packb([MAGIC, 9, *fields[2:]]),  # unknown kind
        msgpack.packb([MAGIC, True, *fields[2:]]),  # bool is no kind
        msgpack.packb([MAGIC, Kind.HELLO_ACK, 1, bytes(32), bytes(12), bytes(16)]),  # server-only kind
        msgpack.packb([MAGIC, Kind.DONE_ACK, 1, bytes(12), bytes(16)]),
        msgpack.packb({"magic": MAGIC}),
        msgpack.packb([*fields, 1]),  # extra field in our own version
        msgpack.packb(fields[:-1]),
        msgpack.packb([*fields[:3], 0, *fields[4:]]),  # connect key 0
        msgpack.packb([*fields[:3], -1, *fields[4:]]),  # negative connect key
        msgpack.packb([*fields[:4], bytes(31), *fields[5:]]),  # short client key
        msgpack.packb([*fields[:4], "x" * 32, *fields[5:]]),  # str is no bytes
        msgpack.packb([*fields[:5], bytes(33), *fields[6:]]),  # long registration hash
        msgpack.packb([*fields[:6], {"a": [1]}, *fields[7:]]),  # reply value not int|str
        msgpack.packb([*fields[:6], {"a": True}, *fields[7:]]),  # bool is not an int here
        msgpack.packb([*fields[:6], [1, 2], *fields[7:]]),
        msgpack.packb([*fields[:7], "t" * 33, fields[8]]),  # tag too long
        msgpack.packb([*fields[:8], 1.5]),  # float timestamp
        msgpack.packb([*fields[:8], -1]),
        b"\x00" * (MAX_PACKET_LENGTH + 1),
    ]
    for packet in bad:
        assert server.receive(packet, "a", T0) is None
    assert counts(server.stats) == {"malformed": len(bad)}
    assert server.stats.received == len(bad)
    assert server.pending_count() == 0
    # The genuine packet still goes through afterwards.
    assert isinstance(server.receive(hello, "a", T0), Hello)


def test_oversize_packet_is_malformed_even_if_otherwise_valid() -> None:
    server = make_server()
    hello = msgpack.unpackb(make_client().hello(T0))
    hello[6] = {"pad": "x" * MAX_PACKET_LENGTH}
    assert server.receive(msgpack.packb(hello), "a", T0) is None
    assert counts(server.stats) == {"malformed": 1}


def test_low_order_client_key_is_malformed() -> None:
    server = make_server()
    fields = msgpack.unpackb(make_client().hello(T0))
    fields[4] = bytes(32)  # the all-zero point: shared secret would be zero
    assert server.receive(msgpack.packb(fields), "a", T0) is None
    assert counts(server.stats) == {"malformed": 1}
    assert server.pending_count() == 0


def test_replayed_hello_is_counted_even_after_the_handshake_finished() -> None:
    server, client = make_server(), make_client()
    hello = client.hello(T0)
    handshake_until_done(server, client)
    server.expire(T0 + TIMEOUT + 1)  # forgets the finished handshake, not the connect key
    assert server.receive(hello, "a", T0 + TIMEOUT + 1) is None
    assert counts(server.stats) == {"replayed": 1}
    assert server.pending_count() == 0


def test_hello_with_a_pending_connect_key_but_another_client_key_is_replayed() -> None:
    server = make_server()
    first = make_client(connect_key=1234)
    assert isinstance(server.receive(first.hello(T0), "a", T0), Hello)
    impostor = make_client(connect_key=1234)
    assert server.receive(impostor.hello(T0), "b", T0) is None
    assert counts(server.stats) == {"replayed": 1}
    assert server.retried is None


@pytest.mark.parametrize("skew_ns", [WINDOW + MS, -WINDOW - MS])
def test_hello_timestamp_outside_the_window_is_replayed(skew_ns: int) -> None:
    server, client = make_server(), make_client()
    assert server.receive(client.hello(T0 + skew_ns), "a", T0) is None
    assert counts(server.stats) == {"replayed": 1}
    # Just inside the window is fine (and the stale one did not burn the connect key).
    assert isinstance(server.receive(client.hello(T0 + skew_ns // 2), "a", T0), Hello)


def test_seen_cache_is_bounded_by_size_and_age() -> None:
    server = make_server(max_seen=8, max_pending=100, max_pending_per_source=100)
    clients = [make_client(connect_key=i + 1) for i in range(10)]
    hellos = [c.hello(T0) for c in clients]
    for i, packet in enumerate(hellos):
        assert isinstance(server.receive(packet, f"s{i}", T0), Hello)
        server.abandon(clients[i].connect_key)
    assert len(server._seen) == 8
    # The two oldest were evicted for size: their replay gets through (the documented trade-off) ...
    assert isinstance(server.receive(hellos[0], "s0", T0), Hello)
    # ... the others are still caught.
    assert server.receive(hellos[5], "s5", T0) is None
    assert counts(server.stats) == {"replayed": 1}
    # Age: entries older than two windows are pruned.
    server.expire(T0 + 2 * WINDOW + 1)
    assert len(server._seen) == 0


def test_done_for_unknown_or_unacked_key_is_unknown() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    stranger = msgpack.packb([MAGIC, Kind.DONE, 999, bytes(12), bytes(32)])
    assert server.receive(stranger, "a", T0) is None
    # DONE before the glue accepted: nothing has been granted yet.
    early = msgpack.packb([MAGIC, Kind.DONE, client.connect_key, bytes(12), bytes(32)])
    assert server.receive(early, "a", T0) is None
    assert counts(server.stats) == {"unknown": 2}


def test_spoofed_done_sealed_with_another_key_is_counted_and_does_not_complete() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    client.receive(server.accept(client.connect_key, grant_for(9), T0))
    # The attacker knows the connect key and the server key, but not the client's private key.
    forged = spec_key(X25519PrivateKey.generate(), server.public_key, client.public_key, server.public_key, 0)
    forged_done = [MAGIC, Kind.DONE, client.connect_key, bytes(12)]
    forged_done.append(forged.encrypt(bytes(12), msgpack.packb([9]), aad(Kind.DONE, client.connect_key)))
    assert server.receive(msgpack.packb(forged_done), "evil", T0) is None
    assert counts(server.stats) == {"spoofed": 1}
    with pytest.raises(RuntimeError):
        server.complete(client.connect_key)
    # The real client still completes.
    assert server.receive(client.done(), "a", T0) == Done(client.connect_key, 9)


def test_done_with_another_connection_id_is_dropped() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    client.receive(server.accept(client.connect_key, grant_for(9), T0))
    client.grant = grant_for(10)  # a buggy client claiming another connection
    assert server.receive(client.done(), "a", T0) is None
    assert counts(server.stats) == {"malformed": 1}


# ---------------------------------------------------------------------------------------------------- client drops


def test_client_drops_foreign_tampered_and_out_of_order_packets() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    ack = server.accept(client.connect_key, grant_for(3), T0)
    fields = msgpack.unpackb(ack)

    assert client.receive(msgpack.packb([MAGIC, Kind.HELLO_ACK, client.connect_key ^ 1, *fields[3:]])) is None
    tampered = bytearray(fields[5])
    tampered[0] ^= 1
    assert client.receive(msgpack.packb([*fields[:5], bytes(tampered)])) is None
    other_nonce = msgpack.packb([*fields[:4], bytes(12), fields[5]])
    assert client.receive(other_nonce) is None
    # A server key swapped in the clear derives another key: the seal no longer opens.
    other_server = X25519PrivateKey.generate().public_key().public_bytes_raw()
    assert client.receive(msgpack.packb([*fields[:3], other_server, *fields[4:]])) is None
    assert client.receive(ack[:-1]) is None
    assert client.receive(make_client().hello(T0)) is None  # server-bound kind
    early_done_ack = msgpack.packb([MAGIC, Kind.DONE_ACK, client.connect_key, bytes(12), bytes(16)])
    assert client.receive(early_done_ack) is None
    assert counts(client.stats) == {"unknown": 2, "spoofed": 3, "malformed": 2}
    assert client.state == "hello_sent"

    assert isinstance(client.receive(ack), Accepted)
    assert client.receive(ack) is None  # duplicate answer to a HELLO retry: harmless, not a drop
    assert counts(client.stats) == {"unknown": 2, "spoofed": 3, "malformed": 2}


def test_client_drops_done_ack_with_bad_tag() -> None:
    server, client = make_server(), make_client()
    done_ack = msgpack.unpackb(handshake_until_done(server, client))
    tampered = bytearray(done_ack[4])
    tampered[-1] ^= 0x80
    assert client.receive(msgpack.packb([*done_ack[:4], bytes(tampered)])) is None
    assert counts(client.stats) == {"spoofed": 1}
    assert client.state == "done_sent"


def test_sealed_reject_is_authenticated() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    packet = server.reject(client.connect_key, RejectReason.SERVER_FULL, "Server is full")
    assert server.pending_count() == 0
    assert client.receive(packet) == Rejected(RejectReason.SERVER_FULL, "Server is full", authenticated=True)
    assert client.state == "rejected"


def test_reject_after_accept_is_authenticated_with_the_same_key() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    client.receive(server.accept(client.connect_key, grant_for(3), T0))
    packet = server.reject(client.connect_key, RejectReason.IDS_EXHAUSTED, "x" * 1000)
    result = client.receive(packet)
    assert result == Rejected(RejectReason.IDS_EXHAUSTED, "x" * MAX_TEXT_LENGTH, authenticated=True)


def test_unsealed_reject_is_reported_unauthenticated_and_keeps_waiting() -> None:
    client = make_client()
    client.hello(T0)
    result = client.receive(unsealed_reject(client.connect_key, RejectReason.SHUTTING_DOWN, "bye"))
    assert result == Rejected(RejectReason.SHUTTING_DOWN, "bye", authenticated=False)
    assert client.state == "hello_sent"


def test_tampered_sealed_reject_is_spoofed() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    fields = msgpack.unpackb(server.reject(client.connect_key, RejectReason.FILTERED, "no"))
    # Plain reason changed while the seal is intact: the seal disagrees.
    assert client.receive(msgpack.packb([*fields[:6], int(RejectReason.SERVER_FULL), "no"])) is None
    tampered = bytearray(fields[5])
    tampered[3] ^= 4
    assert client.receive(msgpack.packb([*fields[:5], bytes(tampered), *fields[6:]])) is None
    # Unknown reason code: malformed.
    assert client.receive(msgpack.packb([*fields[:6], 999, "no"])) is None
    assert counts(client.stats) == {"spoofed": 2, "malformed": 1}
    assert client.state == "hello_sent"


def test_reject_sealed_by_an_unpinned_key_is_not_authenticated() -> None:
    pinned = X25519PrivateKey.generate().public_key().public_bytes_raw()
    impostor, client = make_server(), make_client(expected_server_key=pinned)
    impostor.receive(client.hello(T0), "a", T0)
    result = client.receive(impostor.reject(client.connect_key, RejectReason.FILTERED, "go away"))
    assert result == Rejected(RejectReason.FILTERED, "go away", authenticated=False)
    assert client.state == "hello_sent"


# ---------------------------------------------------------------------------------------------------- retries


def test_hello_retry_is_not_a_new_handshake_and_gets_the_last_answer() -> None:
    server, client = make_server(), make_client()
    assert isinstance(server.receive(client.hello(T0), "a", T0), Hello)
    assert server.receive(client.hello(T0 + SEC), "a", T0 + SEC) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) is None  # glue has not answered yet
    ack = server.accept(client.connect_key, grant_for(5), T0 + SEC)
    assert server.receive(client.hello(T0 + 2 * SEC), "a", T0 + 2 * SEC) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) == ack
    assert counts(server.stats) == {}
    assert server.stats.received == 3
    assert server.pending_count() == 1
    server.receive(b"junk", "a", T0)
    assert server.retried is None


def test_lost_done_ack_is_resent_on_done_retry() -> None:
    server, client = make_server(), make_client()
    done_ack = handshake_until_done(server, client)  # ... and the DONE_ACK is lost
    assert server.receive(client.done(), "a", T0 + SEC) is None
    assert server.retried == client.connect_key
    resent = server.last_reply(client.connect_key)
    assert resent == done_ack
    assert client.receive(done_ack) == Completed(77)
    assert counts(server.stats) == {}


def test_duplicate_done_before_complete_is_a_retry() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    client.receive(server.accept(client.connect_key, grant_for(5), T0))
    assert isinstance(server.receive(client.done(), "a", T0), Done)
    assert server.receive(client.done(), "a", T0) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) is None
    assert counts(server.stats) == {}


def test_lost_reject_is_resent_on_hello_retry() -> None:
    server, client = make_server(), make_client()
    server.receive(client.hello(T0), "a", T0)
    reject = server.reject(client.connect_key, RejectReason.FILTERED, "no")
    assert server.receive(client.hello(T0 + SEC), "a", T0 + SEC) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) == reject


# ---------------------------------------------------------------------------------------------------- limits & expiry


FLOOD_KEY = X25519PrivateKey.generate()


def test_flood_of_distinct_sources_is_bounded_and_a_legit_client_gets_in_after_expire() -> None:
    server = make_server(max_pending=64, max_pending_per_source=2)
    for i in range(10_000):
        packet = make_client(connect_key=i + 1, private_key=FLOOD_KEY).hello(T0)
        server.receive(packet, f"198.51.{i >> 8}.{i & 255}:9", T0)
    assert server.pending_count() == 64
    assert server.stats.overloaded == 10_000 - 64
    assert len(server._seen) == 64

    legit = make_client()
    assert server.receive(legit.hello(T0 + SEC), "10.0.0.2:1", T0 + SEC) is None
    assert server.stats.overloaded == 10_000 - 63
    expired = server.expire(T0 + TIMEOUT + 1)
    assert sorted(expired) == list(range(1, 65))
    assert server.stats.expired == 64
    assert server.pending_count() == 0
    assert isinstance(server.receive(legit.hello(T0 + TIMEOUT + 2), "10.0.0.2:1", T0 + TIMEOUT + 2), Hello)


def test_per_source_limit() -> None:
    server = make_server(max_pending=100, max_pending_per_source=3)
    for _i in range(5):
        server.receive(make_client().hello(T0), "203.0.113.9:5000", T0)
    assert server.pending_count() == 3
    assert counts(server.stats) == {"overloaded": 2}
    assert isinstance(server.receive(make_client().hello(T0), "203.0.113.10:5000", T0), Hello)
    # Finishing one frees a slot for that source.
    first = next(iter(server._pending))
    server.abandon(first)
    assert isinstance(server.receive(make_client().hello(T0), "203.0.113.9:5000", T0), Hello)
    assert server.receive(make_client().hello(T0), "203.0.113.9:5000", T0) is None
    assert counts(server.stats) == {"overloaded": 3}


def test_expire_removes_only_idle_entries_and_accept_restarts_the_clock() -> None:
    server = make_server()
    a, b, c = make_client(), make_client(), make_client()
    server.receive(a.hello(T0), "a", T0)
    server.receive(b.hello(T0), "b", T0)
    server.receive(c.hello(T0 + 5 * SEC), "c", T0 + 5 * SEC)
    server.accept(b.connect_key, grant_for(1), T0 + 4 * SEC)
    assert server.expire(T0 + TIMEOUT) == []
    assert server.expire(T0 + TIMEOUT + 1) == [a.connect_key]
    assert sorted(server.expire(T0 + TIMEOUT + 5 * SEC + 1)) == sorted([b.connect_key, c.connect_key])
    assert server.stats.expired == 3
    assert server.pending_count() == 0
    with pytest.raises(KeyError):
        server.accept(a.connect_key, grant_for(1), T0)
    # Late DONE of an expired handshake is unknown.
    assert server.receive(msgpack.packb([MAGIC, Kind.DONE, b.connect_key, bytes(12), bytes(16)]), "b", T0) is None
    assert server.stats.unknown == 1


def test_finished_cache_is_bounded() -> None:
    server = make_server(max_pending=4, max_pending_per_source=4)
    clients = [make_client() for _ in range(6)]
    for client in clients:
        server.receive(client.hello(T0), "a", T0)
        server.reject(client.connect_key, RejectReason.FILTERED, "")
    assert len(server._finished) == 4
    assert server.last_reply(clients[0].connect_key) is None
    assert server.last_reply(clients[-1].connect_key) is not None


# ---------------------------------------------------------------------------------------------------- misuse


def test_server_api_misuse_raises() -> None:
    server, client = make_server(), make_client()
    with pytest.raises(KeyError):
        server.accept(1, grant_for(1), T0)
    with pytest.raises(KeyError):
        server.reject(1, RejectReason.FILTERED, "")
    with pytest.raises(KeyError):
        server.complete(1)
    server.abandon(1)  # unknown: ignored
    server.receive(client.hello(T0), "a", T0)
    with pytest.raises(ValueError, match="connection_id"):
        server.accept(client.connect_key, {"session": 1}, T0)
    with pytest.raises(ValueError, match="connection_id"):
        server.accept(client.connect_key, {"connection_id": True}, T0)
    with pytest.raises(ValueError, match="grant must map"):
        server.accept(client.connect_key, {"connection_id": 1, "x": 1.5}, T0)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="packet limit"):
        server.accept(client.connect_key, {"connection_id": 1, "x": b"\x00" * MAX_PACKET_LENGTH}, T0)
    with pytest.raises(RuntimeError):
        server.complete(client.connect_key)
    server.accept(client.connect_key, grant_for(1), T0)
    with pytest.raises(RuntimeError):
        server.accept(client.connect_key, grant_for(1), T0)
    server.abandon(client.connect_key)
    assert server.pending_count() == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"registration_hash": bytes(31)},
        {"tag": "t" * 33},
        {"reply": {"a": 1.5}},
        {"reply": {1: "a"}},
        {"connect_key": 0},
        {"connect_key": 1 << 64},
        {"expected_server_key": bytes(16)},
        {"reply": {"pad": "x" * MAX_PACKET_LENGTH}},
    ],
)
def test_client_configuration_errors(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        make_client(**overrides)


@pytest.mark.parametrize("name", ["handshake_timeout_ns", "replay_window_ns", "max_pending", "max_pending_per_source"])
def test_server_configuration_errors(name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        make_server(**{name: 0})


def test_client_api_misuse_raises() -> None:
    client = make_client()
    with pytest.raises(RuntimeError):
        client.done()
    server = make_server()
    server.receive(client.hello(T0), "a", T0)
    client.receive(server.accept(client.connect_key, grant_for(1), T0))
    with pytest.raises(RuntimeError):
        client.hello(T0)


# ---------------------------------------------------------------------------------------------------- fuzzing

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.sampled_from([MAGIC, 1, 2, 3, 4, 5, bytes(32), bytes(12), bytes(16)]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_envelopes = st.builds(
    lambda kind, rest: msgpack.packb([MAGIC, kind, *rest]),
    st.integers(min_value=0, max_value=6),
    st.lists(_values, max_size=9),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), _envelopes))
def test_garbage_never_raises_and_is_counted(data: bytes) -> None:
    server, client = make_server(), make_client(connect_key=1)
    client.hello(T0)
    assert server.receive(data, "fuzz", T0) is None or server.pending_count() == 1
    s = server.stats
    assert s.received == 1
    assert s.malformed + s.replayed + s.spoofed + s.unknown + s.overloaded + server.pending_count() == 1
    client.receive(data)
    c = client.stats
    assert c.received == 1
    assert c.malformed + c.spoofed + c.unknown <= 1
