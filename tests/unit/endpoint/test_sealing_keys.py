"""Sealed connections' keys and negotiation, sans-IO: both ends derive the same two keys from the handshake, keys
of their own (not the DONE/DONE_ACK keys), fresh per handshake; the client's wish to seal is bound into the
transcript, so nobody on the path can strip it; a connection sealed with them carries messages one way and the
other, and only the keys of its own direction open them."""

from __future__ import annotations

import msgpack  # type: ignore[import-untyped]
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from test_handshake import SRC, T0, accepted, grant_for, hello_with_cookie, make_client, make_server

from endpoint import ConfigurationError, SealError
from endpoint.config import ClientConfiguration, ServerConfiguration
from endpoint.connection.sealing import Opener, Sealer
from endpoint.handshake.noise import CipherState, HandshakeState, NoiseError
from endpoint.handshake.protocol import (
    Bounce,
    ClientHandshake,
    Completed,
    Done,
    Hello,
    Kind,
    SealingKeys,
    ServerHandshake,
    _aad,
)


def finish(server: ServerHandshake, client: ClientHandshake, connection_id: int = 9) -> tuple[Done, Completed]:
    accepted(server, client, connection_id)
    done = server.receive(client.done(), SRC, T0)
    assert isinstance(done, Done)
    completed = client.receive(server.complete(client.connect_key))
    assert isinstance(completed, Completed)
    return done, completed


def test_both_ends_derive_the_same_two_distinct_keys() -> None:
    server, client = make_server(), make_client()
    done, completed = finish(server, client)
    assert isinstance(done.keys, SealingKeys)
    assert done.keys == completed.keys == client.sealing_keys
    keys = done.keys
    assert len(keys.client_to_server) == len(keys.server_to_client) == 32
    assert keys.client_to_server != keys.server_to_client
    assert keys.client_to_server.hex() not in repr(keys), "keys stay out of logs"


def test_sealing_keys_are_not_the_done_keys_and_are_fresh_per_handshake() -> None:
    key = X25519PrivateKey.generate()
    server = make_server(key=key)
    first = make_client()
    done, _ = finish(server, first)
    # DONE was sealed under the client->server split key: neither sealing key opens it.
    assert first._done is not None
    sent = msgpack.unpackb(first._done)[3]
    for candidate in (done.keys.client_to_server, done.keys.server_to_client):
        with pytest.raises(NoiseError):
            CipherState(candidate).decrypt_with_ad(_aad(Kind.DONE, first.connect_key), sent)
    second = make_client()
    again, _ = finish(make_server(key=key), second)
    assert again.keys is not None
    assert {again.keys.client_to_server, again.keys.server_to_client}.isdisjoint(
        {done.keys.client_to_server, done.keys.server_to_client}
    )


def test_client_keys_only_once_completed() -> None:
    server, client = make_server(), make_client()
    accepted(server, client, 3)
    assert client.sealing_keys is None, "not before DONE_ACK proved the server finished the same transcript"


def test_export_key_needs_a_finished_handshake_and_depends_on_the_label() -> None:
    state = HandshakeState("NX", initiator=True, prologue=b"")
    with pytest.raises(NoiseError):
        state.export_key(b"x")
    server, client = make_server(), make_client()
    finish(server, client)
    noise = client._noise
    assert noise.export_key(b"a") != noise.export_key(b"b")
    assert len(noise.export_key(b"a", 16)) == 16


@pytest.mark.parametrize("asked", [False, True])
def test_the_client_wish_to_seal_reaches_the_server(asked: bool) -> None:
    server, client = make_server(), make_client(sealed=asked)
    hello = hello_with_cookie(server, client)
    assert isinstance(hello, Hello)
    assert hello.sealed is asked


def test_an_on_path_change_of_the_seal_flag_breaks_the_handshake() -> None:
    server, client = make_server(), make_client(sealed=True)
    bounce = server.receive(client.hello(T0), SRC, T0)
    assert isinstance(bounce, Bounce)
    client.receive(bounce.packet)
    fields = msgpack.unpackb(client.hello(T0))
    assert fields[14] is True
    fields[14] = False  # an attacker strips the wish to seal (the cookie does not cover it)
    hello = server.receive(msgpack.packb(fields, use_bin_type=True), SRC, T0)
    assert isinstance(hello, Hello)
    assert hello.sealed is False
    answer = server.accept(hello.connect_key, grant_for(4), T0)
    assert client.receive(answer) is None, "the transcripts differ: the client does not believe the answer"
    assert client.stats.spoofed == 1
    assert client.state == "hello_sent"


def test_a_hello_with_a_mistyped_seal_flag_is_malformed() -> None:
    server, client = make_server(), make_client()
    fields = msgpack.unpackb(client.hello(T0))
    fields[14] = 1
    assert server.receive(msgpack.packb(fields, use_bin_type=True), SRC, T0) is None
    assert server.stats.malformed == 1


def test_a_connection_sealed_with_the_derived_keys_carries_both_ways() -> None:
    server, client = make_server(), make_client(sealed=True)
    done, completed = finish(server, client, 21)
    assert done.keys is not None
    assert completed.keys is not None
    to_server = Sealer(completed.keys.client_to_server, connection_id=21, session_id=5, direction=1)
    at_server = Opener(done.keys.client_to_server, connection_id=21, session_id=5, direction=1)
    to_client = Sealer(done.keys.server_to_client, connection_id=21, session_id=6, direction=2)
    at_client = Opener(completed.keys.server_to_client, connection_id=21, session_id=6, direction=2)
    assert at_server.open(to_server.seal(b"up")) == b"up"
    assert at_client.open(to_client.seal(b"down")) == b"down"
    wrong_way = Opener(done.keys.client_to_server, connection_id=21, session_id=6, direction=2)
    with pytest.raises(SealError):
        wrong_way.open(to_client.seal(b"down"))


def test_sealed_is_a_validated_configuration_field() -> None:
    assert ServerConfiguration().sealed is False
    assert ClientConfiguration(sealed=True).sealed is True
    with pytest.raises(ConfigurationError, match="sealed"):
        ClientConfiguration(sealed=1)  # type: ignore[arg-type]
