"""The Noise module against the published test vectors (noise_vectors.json says where they come from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from endpoint.handshake.noise import CipherState, HandshakeState, NoiseError

_VECTORS = json.loads((Path(__file__).parent / "noise_vectors.json").read_text())["vectors"]


def _key(hex_key: str | None) -> X25519PrivateKey | None:
    return X25519PrivateKey.from_private_bytes(bytes.fromhex(hex_key)) if hex_key else None


def _pair(vector: dict[str, Any]) -> tuple[HandshakeState, HandshakeState]:
    pattern = vector["protocol_name"].split("_")[1]
    initiator = HandshakeState(
        pattern,
        initiator=True,
        prologue=bytes.fromhex(vector["init_prologue"]),
        static=_key(vector.get("init_static")),
        remote_static=bytes.fromhex(vector["init_remote_static"]) if "init_remote_static" in vector else None,
        ephemeral=_key(vector["init_ephemeral"]),
    )
    responder = HandshakeState(
        pattern,
        initiator=False,
        prologue=bytes.fromhex(vector["resp_prologue"]),
        static=_key(vector["resp_static"]),
        ephemeral=_key(vector["resp_ephemeral"]),
    )
    return initiator, responder


@pytest.mark.parametrize("vector", _VECTORS, ids=[v["protocol_name"] for v in _VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    initiator, responder = _pair(vector)
    ciphers: dict[bool, tuple[CipherState, CipherState]] = {}
    for index, message in enumerate(vector["messages"]):
        payload, ciphertext = bytes.fromhex(message["payload"]), bytes.fromhex(message["ciphertext"])
        from_initiator = index % 2 == 0
        writer, reader = (initiator, responder) if from_initiator else (responder, initiator)
        if not initiator.finished:
            assert writer.write_message(payload) == ciphertext
            assert reader.read_message(ciphertext) == payload
            if initiator.finished:
                assert responder.finished
                assert initiator.handshake_hash.hex() == vector["handshake_hash"]
                assert responder.handshake_hash.hex() == vector["handshake_hash"]
                ciphers = {True: initiator.split(), False: responder.split()}
            continue
        send = ciphers[from_initiator][0]
        receive = ciphers[not from_initiator][1]
        assert send.encrypt_with_ad(b"", payload) == ciphertext
        assert receive.decrypt_with_ad(b"", ciphertext) == payload
    assert ciphers, "the vector never finished its handshake"


@pytest.mark.parametrize("vector", _VECTORS, ids=[v["protocol_name"] for v in _VECTORS])
def test_tampering_is_refused(vector: dict[str, Any]) -> None:
    initiator, responder = _pair(vector)
    first = initiator.write_message(b"hello")
    responder.read_message(first)
    second = bytearray(responder.write_message(b"grant"))
    second[-1] ^= 1
    with pytest.raises(NoiseError):
        initiator.read_message(bytes(second))


def test_another_prologue_does_not_verify() -> None:
    server = X25519PrivateKey.generate()
    public = server.public_key().public_bytes_raw()
    client = HandshakeState("NK", initiator=True, prologue=b"one", remote_static=public)
    responder = HandshakeState("NK", initiator=False, prologue=b"two", static=server)
    with pytest.raises(NoiseError):
        responder.read_message(client.write_message(b"x"))


def test_nk_against_the_wrong_server_key_fails() -> None:
    server, other = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    client = HandshakeState("NK", initiator=True, prologue=b"", remote_static=other.public_key().public_bytes_raw())
    responder = HandshakeState("NK", initiator=False, prologue=b"", static=server)
    with pytest.raises(NoiseError):
        responder.read_message(client.write_message(b""))


def test_short_and_low_order_messages_raise_noise_error() -> None:
    server = X25519PrivateKey.generate()
    for message in (b"", b"\x00" * 10, b"\x00" * 32, b"\x00" * 48, b"\x01" + b"\x00" * 47):
        responder = HandshakeState("NX", initiator=False, prologue=b"", static=server)
        try:
            responder.read_message(message)
        except NoiseError:
            continue
        # NX's first message is unencrypted: a 32-byte "key" is read; replying then needs a usable one.
        with pytest.raises(NoiseError):
            responder.write_message(b"")


def test_a_failed_read_leaves_the_state_for_the_real_message() -> None:
    server = X25519PrivateKey.generate()
    client = HandshakeState("NX", initiator=True, prologue=b"p")
    responder = HandshakeState("NX", initiator=False, prologue=b"p", static=server)
    responder.read_message(client.write_message(b""))
    real = responder.write_message(b"grant")
    forged = HandshakeState("NX", initiator=False, prologue=b"p", static=X25519PrivateKey.generate())
    forged_first = HandshakeState("NX", initiator=True, prologue=b"p")
    forged.read_message(forged_first.write_message(b""))
    with pytest.raises(NoiseError):
        client.read_message(forged.write_message(b"lie"))
    assert client.read_message(real) == b"grant"
    assert client.finished
    assert client.remote_static == server.public_key().public_bytes_raw()
