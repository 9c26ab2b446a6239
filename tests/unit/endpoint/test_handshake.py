"""Handshake codecs and state machines: the Noise flows, the cookie round, every counted drop, floods, retries and
an attacker on the path (sans-IO: time is injected)."""

from __future__ import annotations

from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoint.errors import ClientRejectedError, ConfigurationError, HandshakeError, RejectReason
from endpoint.handshake.protocol import (
    COOKIE_LENGTH,
    MAGIC,
    MAX_PACKET_LENGTH,
    PROTOCOL_VERSION,
    Accepted,
    Bounce,
    ClientHandshake,
    Completed,
    CookieReceived,
    Done,
    Hello,
    Kind,
    Rejected,
    ServerHandshake,
    answer_key,
    unsealed_reject,
)

T0 = 1_700_000_000 * 1_000_000_000
SEC = 1_000_000_000
TIMEOUT = 10 * SEC
PERIOD = 30 * SEC
REG = bytes(range(32))
SRC = "10.0.0.2"
REPLY: dict[str, int | str] = {"port": 40123}


def make_server(**overrides: Any) -> ServerHandshake:
    options: dict[str, Any] = {
        "handshake_timeout_ns": TIMEOUT,
        "cookie_period_ns": PERIOD,
        "max_pending": 16,
        "max_pending_per_source": 4,
    }
    options.update(overrides)
    return ServerHandshake(options.pop("key", None) or X25519PrivateKey.generate(), **options)


def make_client(**overrides: Any) -> ClientHandshake:
    options: dict[str, Any] = {"registration_hash": REG, "reply": REPLY, "tag": "game", "claimed_address": SRC}
    options.update(overrides)
    return ClientHandshake(**options)


def grant_for(connection_id: int) -> dict[str, int | str | bytes | bool]:
    return {"connection_id": connection_id, "session_in": 11, "ipc": False, "blob": b"\x00\x01"}


def hello_with_cookie(
    server: ServerHandshake, client: ClientHandshake, source: str = SRC, now: int = T0
) -> Hello | Bounce | Done | None:
    """The cookie round, then the HELLO the server admits (or not)."""
    bounce = server.receive(client.hello(now), source, now)
    assert isinstance(bounce, Bounce), bounce
    assert isinstance(client.receive(bounce.packet), CookieReceived)
    return server.receive(client.hello(now), source, now)


def accepted(server: ServerHandshake, client: ClientHandshake, connection_id: int, source: str = SRC) -> bytes:
    hello = hello_with_cookie(server, client, source)
    assert isinstance(hello, Hello)
    answer = server.accept(hello.connect_key, grant_for(connection_id), T0)
    result = client.receive(answer)
    assert isinstance(result, Accepted), result
    return answer


def complete(server: ServerHandshake, client: ClientHandshake, connection_id: int, source: str = SRC) -> None:
    accepted(server, client, connection_id, source)
    done = server.receive(client.done(), source, T0)
    assert done == Done(client.connect_key, connection_id)
    assert client.receive(server.complete(client.connect_key)) == Completed(connection_id)


# ------------------------------------------------------------------------------------------------ happy paths


def test_nx_handshake_with_a_cookie_round() -> None:
    server, client = make_server(), make_client()
    first = client.hello(T0)
    bounce = server.receive(first, SRC, T0)
    assert isinstance(bounce, Bounce)
    assert bounce.reply == REPLY
    assert server.pending_count() == 0, "a cookie costs the server nothing"
    assert answer_key(bounce.packet) == client.connect_key
    assert isinstance(client.receive(bounce.packet), CookieReceived)
    hello = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(hello, Hello)
    assert (hello.registration_hash, hello.reply, hello.tag, hello.source) == (REG, REPLY, "game", SRC)
    assert hello.pattern == "NX"
    assert hello.protocol_version == PROTOCOL_VERSION
    answer = server.accept(client.connect_key, grant_for(77), T0)
    result = client.receive(answer)
    assert result == Accepted(server.public_key, grant_for(77))
    assert client.server_public == server.public_key
    done = client.done()
    assert client.done() == done, "DONE is the same bytes when resent"
    assert server.receive(done, SRC, T0) == Done(client.connect_key, 77)
    assert client.receive(server.complete(client.connect_key)) == Completed(77)
    assert client.state == "completed"
    assert server.stats.challenged == 1
    assert (server.stats.malformed, server.stats.spoofed, client.stats.spoofed) == (0, 0, 0)


def test_nk_once_the_key_is_pinned() -> None:
    server = make_server()
    client = make_client(expected_server_key=server.public_key)
    assert client.pattern == "NK"
    complete(server, client, 5)


def test_ipc_needs_no_cookie_and_no_claimed_address() -> None:
    server, client = make_server(), make_client(claimed_address="", reply={})
    hello = server.receive(client.hello(T0), "ipc:9", T0, routable=True)
    assert isinstance(hello, Hello)
    assert server.stats.challenged == 0


def test_each_handshake_has_its_own_keys_forward_secret() -> None:
    """The same client key material twice still gives different transcripts (fresh ephemerals on both sides)."""
    key = X25519PrivateKey.generate()
    server = make_server(key=key)
    one, two = make_client(connect_key=1), make_client(connect_key=2)
    accepted(server, one, 1)
    accepted(server, two, 2)
    assert one.handshake_hash != two.handshake_hash


# ------------------------------------------------------------------------------------------------ pins


def test_nk_against_another_key_gets_an_unsealed_hint_before_any_cookie() -> None:
    server = make_server()
    client = make_client(expected_server_key=X25519PrivateKey.generate().public_key().public_bytes_raw())
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    result = client.receive(bounce.packet)
    assert result == Rejected(RejectReason.SERVER_KEY_CHANGED, "the server's key changed", authenticated=False)
    assert server.pending_count() == 0


def test_nx_with_a_pin_reports_a_changed_key_authenticated() -> None:
    server = make_server()
    pinned = X25519PrivateKey.generate().public_key().public_bytes_raw()
    client = make_client(expected_server_key=pinned, force_nx=True)
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    result = client.receive(server.accept(client.connect_key, grant_for(1), T0))
    assert isinstance(result, Rejected)
    assert result.reason is RejectReason.SERVER_KEY_CHANGED
    assert result.authenticated
    assert client.grant is None


# ------------------------------------------------------------------------------------------------ on-path attacker


def test_flipped_registration_hash_gives_the_client_nothing_it_believes() -> None:
    """The server sees another hash and rejects, sealed under a transcript the client does not share."""
    server, client = make_server(), make_client()
    forged = make_client(registration_hash=bytes(32), connect_key=client.connect_key, private_key=None)
    # The attacker rewrites the hash but must keep the client's Noise message: rebuild HELLO with the client's.
    fields = msgpack.unpackb(client.hello(T0))
    fields[5] = bytes(32)
    bounce = server.receive(msgpack.packb(fields), SRC, T0)
    assert isinstance(bounce, Bounce)
    fields = msgpack.unpackb(forged.hello(T0))
    client.receive(bounce.packet)  # the cookie is bound to the ephemeral, not to the hash
    fields = msgpack.unpackb(client.hello(T0))
    fields[5] = bytes(32)
    hello = server.receive(msgpack.packb(fields), SRC, T0)
    assert isinstance(hello, Hello)
    assert hello.registration_hash == bytes(32)
    answer = server.reject(hello.connect_key, RejectReason.SERIALIZATION_MISMATCH, "mismatch")
    assert client.receive(answer) is None
    assert client.stats.spoofed == 1
    assert client.state == "hello_sent", "still waiting for a real answer"


@pytest.mark.parametrize("pattern", ["NX", "NK"])
def test_rewritten_reply_port_or_tag_breaks_the_transcript(pattern: str) -> None:
    server = make_server()
    client = make_client(expected_server_key=server.public_key if pattern == "NK" else None)
    first = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(first, Bounce)
    client.receive(first.packet)
    fields = msgpack.unpackb(client.hello(T0))
    fields[6] = {"port": 6666}
    # The cookie was made for the real reply route: with another one the server asks again.
    assert isinstance(server.receive(msgpack.packb(fields), SRC, T0), Bounce)
    assert server.stats.bad_cookie == 1
    # An attacker who got its own cookie for the rewritten route still cannot make an answer the client opens.
    fields[11] = None
    bounce = server.receive(msgpack.packb(fields), SRC, T0)
    assert isinstance(bounce, Bounce)
    fields[11] = msgpack.unpackb(bounce.packet)[3][:COOKIE_LENGTH]
    hello = server.receive(msgpack.packb(fields), SRC, T0)
    if pattern == "NK":
        assert hello is None
        assert server.stats.spoofed == 1
        return
    assert isinstance(hello, Hello)
    assert client.receive(server.accept(hello.connect_key, grant_for(3), T0)) is None
    assert client.stats.spoofed == 1


def test_hello_resent_from_another_address_is_misrouted() -> None:
    server, client = make_server(), make_client()
    # From another address the client's HELLO earns a cookie for that address only...
    bounce = server.receive(client.hello(T0), "10.6.6.6", T0)
    assert isinstance(bounce, Bounce)
    fields = msgpack.unpackb(client.hello(T0))
    fields[11] = msgpack.unpackb(bounce.packet)[3][:COOKIE_LENGTH]
    # ... and with it, the HELLO still claims the client's address, so from there it is misrouted.
    assert server.receive(msgpack.packb(fields), "10.6.6.6", T0) is None
    assert server.stats.misrouted == 1
    # A cookie earned at the real address does not work from another one.
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    client.receive(bounce.packet)
    assert isinstance(server.receive(client.hello(T0), "10.6.6.6", T0), Bounce)
    assert server.stats.bad_cookie == 1
    assert server.pending_count() == 0


@pytest.mark.parametrize("pattern", ["NX", "NK"])
def test_a_client_behind_a_nat_claims_the_address_its_cookie_reports(pattern: str) -> None:
    server = make_server()
    public = "203.0.113.7"
    client = make_client(claimed_address=SRC, expected_server_key=server.public_key if pattern == "NK" else None)
    complete(server, client, 5, source=public)  # the cookie round, then the whole handshake from there
    assert client.claimed_address == public
    assert server.stats.misrouted == 0


def test_a_cookie_reporting_no_address_is_ignored() -> None:
    server, client = make_server(), make_client()
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    fields = msgpack.unpackb(bounce.packet)
    for tail in (b"", b"not an address", b"1" * 100):
        fields[3] = fields[3][:COOKIE_LENGTH] + tail
        assert client.receive(msgpack.packb(fields)) is None
    assert client.cookie is None
    assert client.stats.unknown == 3


def test_cookie_from_another_time_bucket_is_refused() -> None:
    server, client = make_server(), make_client()
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    client.receive(bounce.packet)
    assert isinstance(server.receive(client.hello(T0), SRC, T0 + 3 * PERIOD), Bounce)
    assert server.stats.bad_cookie == 1
    assert server.pending_count() == 0


@pytest.mark.parametrize("pinned", [False, True])
def test_answers_sealed_under_other_keys_and_unsealed_rejects_are_ignored(pinned: bool) -> None:
    server = make_server()
    client = make_client(expected_server_key=server.public_key if pinned else None)
    hello_with_cookie(server, client)
    # Answers made for other handshakes (another client's, another server's), relabelled with our connect key.
    other = make_client()
    other_answer = accepted(make_server(), other, 666)
    for answer in (other_answer, accepted(server, make_client(), 667)):
        fields = msgpack.unpackb(answer)
        fields[2] = client.connect_key
        assert client.receive(msgpack.packb(fields)) is None
    assert client.stats.spoofed == 2
    if pinned:
        # A rogue server with its own key cannot even read a pinned client's HELLO.
        rogue = make_server()
        assert isinstance(rogue.receive(client.hello(T0), SRC, T0, routable=True), Bounce)
    # After a cookie the server may hold a key: a plain REJECT is not believed, only kept as a hint.
    assert client.receive(unsealed_reject(client.connect_key, RejectReason.SERVER_FULL, "go away")) is None
    assert client.stats.unsealed == 1
    assert client.hint is not None
    result = client.receive(server.accept(client.connect_key, grant_for(1), T0))
    assert isinstance(result, Accepted)
    assert result.grant["connection_id"] == 1


def test_unsealed_reject_before_a_cookie_is_only_a_hint() -> None:
    client = make_client()
    client.hello(T0)
    result = client.receive(unsealed_reject(client.connect_key, RejectReason.SERVER_FULL, "full"))
    assert result == Rejected(RejectReason.SERVER_FULL, "full", authenticated=False)
    error = ClientRejectedError(RejectReason.SERVER_FULL, "full", authenticated=False)
    assert error.retryable
    assert "unauthenticated" in str(error)
    assert not ClientRejectedError(RejectReason.SERIALIZATION_MISMATCH, "x").retryable


def test_reordered_and_replayed_answers_change_nothing() -> None:
    server, client = make_server(), make_client()
    answer = accepted(server, client, 4)
    done_ack_too_early = None
    assert client.receive(answer) is None, "a resent answer is a duplicate"
    assert client.receive(b"") is None
    done = server.receive(client.done(), SRC, T0)
    assert isinstance(done, Done)
    done_ack = server.complete(client.connect_key)
    assert server.receive(client.done(), SRC, T0) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) == done_ack
    assert client.receive(done_ack) == Completed(4)
    assert client.receive(done_ack) is None
    assert done_ack_too_early is None


def test_replayed_hello_after_the_handshake_is_a_retry_then_refused() -> None:
    server, client = make_server(), make_client()
    complete(server, client, 9)
    hello = client._hello_packet(0)
    assert server.receive(hello, SRC, T0) is None
    assert server.retried == client.connect_key
    later = T0 + 2 * TIMEOUT
    server.expire(later)
    assert server.receive(hello, SRC, later) is None
    assert server.stats.replayed == 1
    assert server.pending_count() == 0


def test_stolen_connect_key_with_another_ephemeral_is_replayed() -> None:
    server, client = make_server(), make_client()
    hello_with_cookie(server, client)
    thief = make_client(connect_key=client.connect_key)
    assert server.receive(thief.hello(T0), SRC, T0) is None
    assert server.stats.replayed == 1


def test_forged_done_is_spoofed_and_a_rejected_handshakes_done_unknown() -> None:
    server, client = make_server(), make_client()
    accepted(server, client, 2)
    forged = msgpack.packb([MAGIC, Kind.DONE, client.connect_key, b"\x00" * 40])
    assert server.receive(forged, SRC, T0) is None
    assert server.stats.spoofed == 1
    assert server.receive(msgpack.packb([MAGIC, Kind.DONE, 12345, b"x" * 20]), SRC, T0) is None
    assert server.stats.unknown == 1


# ------------------------------------------------------------------------------------------------ admission


def test_a_full_server_evicts_the_oldest_half_open_handshake_and_tells_it() -> None:
    server = make_server(max_pending=4, max_pending_per_source=2)
    stale = [make_client(claimed_address=f"10.0.1.{i}") for i in range(4)]
    for i, client in enumerate(stale):
        accepted(server, client, 100 + i, source=f"10.0.1.{i}")
    assert server.pending_count() == 4
    legit = make_client()
    hello = hello_with_cookie(server, legit)
    assert isinstance(hello, Hello), "the newcomer is admitted"
    assert server.stats.evicted == 1
    assert server.pending_count() == 4
    ((key, packet),) = server.evicted
    assert key == stale[0].connect_key
    busy = stale[0].receive(packet)
    assert busy == Rejected(RejectReason.SERVER_BUSY, "the server is busy with other handshakes; try again", True)
    # The others cannot read it.
    assert stale[1].receive(packet) is None


def test_a_full_server_evicts_from_the_source_holding_the_most() -> None:
    server = make_server(max_pending=4, max_pending_per_source=4)
    legit = make_client()
    accepted(server, legit, 1)  # the oldest of all
    flood = [make_client(claimed_address="10.9.9.9") for _ in range(5)]
    for i, client in enumerate(flood):
        # Spaced by half the handshake timeout: the flood's oldest has idled that long each time, so gives way
        # (younger ones would make the flood's newest wait instead: see test_a_burst_from_one_source_...).
        hello = hello_with_cookie(server, client, "10.9.9.9", now=T0 + i * (TIMEOUT // 2))
        assert isinstance(hello, Hello)
    assert server.is_pending(legit.connect_key), "a lone client is not evicted by a flood from another source"
    assert [key for key, _ in server.evicted] == [flood[0].connect_key, flood[1].connect_key]


def test_per_source_cap_evicts_that_sources_oldest_once_it_idled() -> None:
    server = make_server(max_pending=16, max_pending_per_source=2)
    mine = [make_client() for _ in range(3)]
    other = make_client(claimed_address="10.0.0.9")
    accepted(server, other, 50, source="10.0.0.9")
    for i, client in enumerate(mine[:2]):
        hello = hello_with_cookie(server, client)
        assert isinstance(hello, Hello)
        server.accept(client.connect_key, grant_for(i), T0)
    later = T0 + TIMEOUT // 2  # the oldest has idled half the handshake timeout: stalled, it gives way
    hello = hello_with_cookie(server, mine[2], now=later)
    assert isinstance(hello, Hello)
    assert [key for key, _ in server.evicted] == [mine[0].connect_key]
    assert server.is_pending(other.connect_key)


def test_a_burst_from_one_source_is_not_turned_away() -> None:
    """Many clients behind one address connecting at once: at the per-source cap the newest waits (dropped,
    counted; its client asks again) instead of evicting one of the same source that is still under way."""
    server = make_server(max_pending=16, max_pending_per_source=2)
    mine = [make_client() for _ in range(3)]
    for i, client in enumerate(mine[:2]):
        accepted(server, client, i)
    assert hello_with_cookie(server, mine[2], now=T0 + TIMEOUT // 4) is None
    assert server.evicted == []
    assert server.stats.overloaded == 1
    assert server.stats.evicted == 0
    # The first two finish; then the third's HELLO (asked again, same cookie round) is admitted.
    for client in mine[:2]:
        assert isinstance(server.receive(client.done(), SRC, T0 + TIMEOUT // 4), Done)
        assert isinstance(client.receive(server.complete(client.connect_key)), Completed)
    assert isinstance(server.receive(mine[2].hello(T0 + TIMEOUT // 4), SRC, T0 + TIMEOUT // 4), Hello)


def test_a_full_server_still_evicts_another_sources_young_handshake() -> None:
    """The grace is for a source against itself only: a flood elsewhere still gives way to a lone client."""
    server = make_server(max_pending=2, max_pending_per_source=2)
    flood = [make_client(claimed_address="10.9.9.9") for _ in range(2)]
    for i, client in enumerate(flood):
        accepted(server, client, 10 + i, source="10.9.9.9")
    assert isinstance(hello_with_cookie(server, make_client()), Hello)
    assert [key for key, _ in server.evicted] == [flood[0].connect_key]


def test_evicting_a_handshake_not_yet_answered_rejects_it_in_its_answer() -> None:
    server = make_server(max_pending=1, max_pending_per_source=1)
    first, second = make_client(), make_client()
    assert isinstance(hello_with_cookie(server, first), Hello)
    assert isinstance(hello_with_cookie(server, second, now=T0 + TIMEOUT // 2), Hello)
    ((key, packet),) = server.evicted
    assert key == first.connect_key
    result = first.receive(packet)
    assert isinstance(result, Rejected)
    assert result.reason is RejectReason.SERVER_BUSY
    assert result.authenticated
    with pytest.raises(KeyError):
        server.accept(first.connect_key, grant_for(1), T0)


def test_handshakes_with_their_done_are_not_evicted() -> None:
    server = make_server(max_pending=1, max_pending_per_source=1)
    first = make_client()
    accepted(server, first, 1)
    assert isinstance(server.receive(first.done(), SRC, T0), Done)
    assert hello_with_cookie(server, make_client()) is None
    assert server.stats.overloaded == 1


def test_expire_frees_idle_handshakes_only() -> None:
    server = make_server()
    old, new = make_client(), make_client()
    accepted(server, old, 1)
    hello = hello_with_cookie(server, new, now=T0 + TIMEOUT)
    assert isinstance(hello, Hello)
    server._pending[new.connect_key].updated_ns = T0 + TIMEOUT
    assert server.expire(T0 + TIMEOUT + 1) == [old.connect_key]
    assert server.stats.expired == 1
    assert server.is_pending(new.connect_key)


def test_finished_handshakes_are_forgotten_oldest_first_after_the_timeout() -> None:
    server = make_server()
    dones = []
    for connection_id, now in ((1, T0), (2, T0 + TIMEOUT)):
        client = make_client()
        accepted(server, client, connection_id)
        dones.append(client.done())
        assert isinstance(server.receive(dones[-1], SRC, now), Done)
        server.complete(client.connect_key)
    assert server.expire(T0 + TIMEOUT + 1) == []  # (finished ones are not the glue's to free)
    # The first one's DONE, resent now, is not known any more; the second's still gets its DONE_ACK again.
    assert server.receive(dones[0], SRC, T0 + TIMEOUT + 1) is None
    assert server.stats.unknown == 1
    assert server.receive(dones[1], SRC, T0 + TIMEOUT + 1) is None
    assert server.retried == client.connect_key  # (the second, the loop's last)
    assert server.expire(T0 + 2 * TIMEOUT + 1) == []
    assert server.receive(dones[1], SRC, T0 + 2 * TIMEOUT + 1) is None
    assert server.stats.unknown == 2


# ------------------------------------------------------------------------------------------------ schemas


SCHEMA = b"packed schemas of the client"


def test_the_clients_schema_reaches_the_server_and_a_rejection_names_what_differs() -> None:
    server, client = make_server(), make_client(schema=SCHEMA)
    assert client.hello_length == len(client.hello(T0))
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    assert hello.schema == SCHEMA
    detail: dict[str, int | str] = {"type_id": 3, "class": "game.Move", "field": "speed"}
    answer = server.reject(hello.connect_key, RejectReason.SERIALIZATION_MISMATCH, "speed differs", detail)
    assert client.receive(answer) == Rejected(
        RejectReason.SERIALIZATION_MISMATCH, "speed differs", authenticated=True, detail=detail
    )


def test_no_schema_is_none_at_the_server() -> None:
    server, client = make_server(), make_client()
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    assert hello.schema is None


def test_a_rewritten_schema_breaks_the_transcript() -> None:
    """The schema is in the prologue: a server judging schemas an attacker swapped in gets no answer believed."""
    server, client = make_server(), make_client(schema=SCHEMA)
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    client.receive(bounce.packet)
    fields = msgpack.unpackb(client.hello(T0))
    fields[15] = b"other schemas"
    hello = server.receive(msgpack.packb(fields), SRC, T0)
    assert isinstance(hello, Hello)
    assert hello.schema == b"other schemas"
    assert client.receive(server.accept(hello.connect_key, grant_for(3), T0)) is None
    assert client.stats.spoofed == 1


@pytest.mark.parametrize("detail", [{"a": [1]}, {1: "x"}, {f"k{i}": i for i in range(9)}, {"a": "x" * 300}])
def test_a_malformed_rejection_detail_is_refused(detail: Any) -> None:
    server, client = make_server(), make_client()
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    with pytest.raises(HandshakeError):
        server.reject(hello.connect_key, RejectReason.SERIALIZATION_MISMATCH, "x", detail)


# ------------------------------------------------------------------------------------------------ versions


def test_a_version_2_hello_is_refused_by_version() -> None:
    """Version 2 (messages as positional arrays, no schemas): refused, unsealed, in the layout it reads."""
    server = make_server()
    fields = msgpack.unpackb(make_client().hello(T0))
    fields[2] = 2
    bounce = server.receive(msgpack.packb(fields[:15]), SRC, T0)
    assert isinstance(bounce, Bounce)
    fields = msgpack.unpackb(bounce.packet)
    assert fields[6] == RejectReason.VERSION_MISMATCH
    assert "version 2" in fields[7]


def test_a_version_1_hello_is_refused_unsealed_in_version_1_layout() -> None:
    server = make_server()
    old = msgpack.packb([MAGIC, Kind.HELLO, 1, 99, b"k" * 32, REG, REPLY, "", T0 // 1_000_000])
    bounce = server.receive(old, SRC, T0)
    assert isinstance(bounce, Bounce)
    fields = msgpack.unpackb(bounce.packet)
    assert fields[:6] == [MAGIC, Kind.REJECT, 99, None, None, None]
    assert fields[6] == RejectReason.VERSION_MISMATCH
    assert "version 1" in fields[7]
    assert server.pending_count() == 0


def test_a_version_1_servers_sealed_reject_is_an_unauthenticated_hint() -> None:
    client = make_client()
    client.hello(T0)
    old = msgpack.packb([MAGIC, Kind.REJECT, client.connect_key, b"k" * 32, b"n" * 12, b"s" * 30, 5, "version 2"])
    assert client.receive(old) == Rejected(RejectReason.VERSION_MISMATCH, "version 2", authenticated=False)


def test_a_newer_client_is_refused_by_version() -> None:
    server, client = make_server(), make_client(protocol_version=PROTOCOL_VERSION + 1)
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    result = client.receive(bounce.packet)
    assert isinstance(result, Rejected)
    assert result.reason is RejectReason.VERSION_MISMATCH


# ------------------------------------------------------------------------------------------------ misuse and config


def test_server_api_misuse_raises() -> None:
    server, client = make_server(), make_client()
    with pytest.raises(KeyError):
        server.accept(1, grant_for(1), T0)
    with pytest.raises(KeyError):
        server.reject(1, RejectReason.FILTERED, "")
    with pytest.raises(KeyError):
        server.complete(1)
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    with pytest.raises(RuntimeError):
        server.complete(client.connect_key)
    with pytest.raises(ValueError):
        server.accept(client.connect_key, {"no": "id"}, T0)  # type: ignore[dict-item]
    server.accept(client.connect_key, grant_for(1), T0)
    with pytest.raises(RuntimeError):
        server.accept(client.connect_key, grant_for(1), T0)
    server.abandon(client.connect_key)
    server.abandon(client.connect_key)
    assert server.pending_count() == 0


@pytest.mark.parametrize(
    "overrides",
    [{"registration_hash": b"short"}, {"tag": "x" * 100}, {"expected_server_key": b"k"}, {"connect_key": 0}],
)
def test_client_configuration_errors(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        make_client(**overrides)


def test_server_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        make_server(max_pending=0)


def test_client_api_misuse_raises() -> None:
    client = make_client()
    with pytest.raises(RuntimeError):
        client.done()


# ------------------------------------------------------------------------------------------------ fuzzing


def _nested(depth: int) -> bytes:
    return b"\x91" * depth + b"\x00"


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


def _packets() -> st.SearchStrategy[bytes]:
    shaped = st.lists(_json, max_size=15).map(lambda fields: msgpack.packb([MAGIC, *fields]))
    kinds = st.tuples(st.sampled_from([*list(Kind), 0, 99, -1]), st.lists(_json, max_size=14)).map(
        lambda kf: msgpack.packb([MAGIC, int(kf[0]), *kf[1]])
    )
    return (
        st.binary(max_size=300)
        | shaped
        | kinds
        | st.integers(1, 200_000).map(_nested)
        | _json.map(lambda value: msgpack.packb(value))
    )


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(packets=st.lists(_packets(), min_size=1, max_size=5))
def test_nothing_a_packet_holds_makes_receive_raise(packets: list[bytes]) -> None:
    server = make_server()
    pinned = make_server()
    clients = [make_client(), make_client(expected_server_key=pinned.public_key)]
    accepted(server, clients[0], 1)
    before = server.stats.received
    for packet in packets:
        for routable in (False, True):
            result = server.receive(packet, SRC, T0, routable=routable)
            assert result is None or isinstance(result, (Hello, Done, Bounce))
        for client in clients:
            client.receive(packet)
        answer_key(packet)
    assert server.stats.received - before == 2 * len(packets)


def test_deep_nesting_and_huge_packets_are_malformed() -> None:
    server, client = make_server(), make_client()
    for packet in (_nested(100_000), b"\x00" * (MAX_PACKET_LENGTH + 1), b"\xc1", msgpack.packb({"a": 1})):
        assert server.receive(packet, SRC, T0) is None
        assert client.receive(packet) is None
        assert answer_key(packet) is None
    assert server.stats.malformed == 4
    assert client.stats.malformed == 4


def test_an_abandoned_handshake_may_be_asked_again() -> None:
    """The glue could not set it up (no answer route free, say): the client's retry is a new try, not a replay."""
    server, client = make_server(), make_client()
    assert isinstance(hello_with_cookie(server, client), Hello)
    server.abandon(client.connect_key)
    assert isinstance(server.receive(client.hello(T0), SRC, T0), Hello)
    assert server.stats.replayed == 0


# ------------------------------------------------------------------------------------------------ buffered sessions


def test_a_session_claim_proves_the_clients_key_and_gets_the_servers_sync() -> None:
    from endpoint.connection.session import SessionSync
    from endpoint.handshake.protocol import SessionClaim, SessionGranted, SessionOffer

    server, client = make_server(), make_client()
    session_key = X25519PrivateKey.generate()
    accepted(server, client, 5)
    mine = SessionSync(11, 3, 22, 7)
    done = server.receive(client.done(SessionOffer(session_key, mine)), SRC, T0)
    public = session_key.public_key().public_bytes_raw()
    assert done == Done(client.connect_key, 5, session=SessionClaim(public, mine))
    granted = SessionGranted(9, True, SessionSync(22, 8, 11, 2))
    assert client.receive(server.complete(client.connect_key, granted)) == Completed(5, session=granted)


def test_a_server_without_a_session_for_the_claim_answers_none() -> None:
    from endpoint.connection.session import SessionSync
    from endpoint.handshake.protocol import SessionOffer

    server, client = make_server(), make_client()
    accepted(server, client, 5)
    offer = SessionOffer(X25519PrivateKey.generate(), SessionSync(1, 1, 0, 0))
    assert isinstance(server.receive(client.done(offer), SRC, T0), Done)
    assert client.receive(server.complete(client.connect_key, None)) == Completed(5, session=None)


def test_old_peers_see_exactly_one_connection_id() -> None:
    """A client that claims nothing gets [connection_id] even from a server that offers sessions; a claim-less
    DONE_ACK answers a claim with no session."""
    from endpoint.connection.session import SessionSync
    from endpoint.handshake.protocol import SessionGranted

    server, client = make_server(), make_client()
    complete(server, client, 6)  # no claim: complete() ignores a session answer too
    server, client = make_server(), make_client()
    accepted(server, client, 6)
    server.receive(client.done(), SRC, T0)
    ack = server.complete(client.connect_key, SessionGranted(1, False, SessionSync(1, 1, 0, 0)))
    assert client.receive(ack) == Completed(6)


def test_a_session_claim_with_a_forged_proof_or_replayed_into_another_handshake_is_dropped() -> None:
    from endpoint.connection.session import SessionSync
    from endpoint.handshake.protocol import SessionOffer, _seal, _session_proof

    session_key = X25519PrivateKey.generate()
    public = session_key.public_key().public_bytes_raw()
    sync = [1, 1, 0, 0]
    server, client = make_server(), make_client()
    accepted(server, client, 5)
    assert client._send is not None
    forged = _seal(client._send, Kind.DONE, client.connect_key, [5, [public, bytes(16), sync]])
    assert server.receive(forged, SRC, T0) is None
    assert server.stats.spoofed == 1
    # A proof made for one handshake does not open another, even between the same two keys.
    key = X25519PrivateKey.generate()
    first_server, first = make_server(key=key), make_client()
    accepted(first_server, first, 5)
    first.done(SessionOffer(session_key, SessionSync(1, 1, 0, 0)))
    stolen = _session_proof(session_key, first_server.public_key, first._noise)
    second_server, second = make_server(key=key), make_client()
    accepted(second_server, second, 5)
    assert second._send is not None
    replay = _seal(second._send, Kind.DONE, second.connect_key, [5, [public, stolen, sync]])
    assert second_server.receive(replay, SRC, T0) is None
    assert second_server.stats.spoofed == 1
    # The same DONE with the proof made for this handshake goes through (so the drops above were the proof's).
    third_server, third = make_server(key=key), make_client()
    accepted(third_server, third, 5)
    assert third._send is not None
    good = _session_proof(session_key, third_server.public_key, third._noise)
    done = third_server.receive(_seal(third._send, Kind.DONE, third.connect_key, [5, [public, good, sync]]), SRC, T0)
    assert isinstance(done, Done)
    assert done.session is not None
    assert done.session.public_key == public


# ------------------------------------------------------------------------------------------------ connect storms


def test_a_busy_refusal_is_sealed_and_carries_the_retry_after() -> None:
    server, client = make_server(), make_client()
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    resent = client.hello(T0)  # the same HELLO again, as the client sends it when no answer came
    packet = server.reject(client.connect_key, RejectReason.SERVER_BUSY, "busy", {"retry_after_ms": 250})
    result = client.receive(packet)
    assert result == Rejected(RejectReason.SERVER_BUSY, "busy", True, {"retry_after_ms": 250})
    assert not server.is_pending(client.connect_key)
    # Its HELLO resent (the refusal was lost) is a retry of a finished handshake: the same refusal, nothing new.
    assert server.receive(resent, SRC, T0) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) == packet


def test_a_resent_hello_keeps_an_answered_handshake_from_expiring() -> None:
    """The answer's route is back-pressured and the client asks again: the resend reuses the pending work (the same
    answer) and restarts its timeout, so nothing is thrown away and built again while the client is still asking."""
    server, client = make_server(), make_client()
    assert isinstance(hello_with_cookie(server, client), Hello)
    resent = client.hello(T0)
    answer = server.accept(client.connect_key, grant_for(7), T0)
    later = T0 + TIMEOUT - 1
    assert server.receive(resent, SRC, later) is None
    assert server.retried == client.connect_key
    assert server.last_reply(client.connect_key) == answer
    assert server.expire(T0 + TIMEOUT + SEC) == []
    assert server.is_pending(client.connect_key)
    assert server.expire(later + TIMEOUT + 1) == [client.connect_key]


def test_keep_restarts_an_answered_handshakes_timeout() -> None:
    server, client = make_server(), make_client()
    accepted(server, client, 7)
    server.keep(client.connect_key, T0 + TIMEOUT // 2)
    server.keep(12345, T0)  # unknown: ignored
    assert server.expire(T0 + TIMEOUT + 1) == []
    assert server.expire(T0 + TIMEOUT // 2 + TIMEOUT + 1) == [client.connect_key]
