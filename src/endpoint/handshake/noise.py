"""The Noise protocol framework (revision 34), the parts the handshake uses: no I/O, no clock.

Two patterns over X25519, ChaCha20-Poly1305 and SHA-256:

- ``NX`` when the client knows nothing of the server: ``-> e``, ``<- e, ee, s, es``;
- ``NK`` once it has pinned the server's key: ``<- s`` (known beforehand), ``-> e, es``, ``<- e, ee``.

Both give forward secrecy (``ee``), authenticate the server (``es``) and bind
everything sent so far, the prologue included, into the handshake hash and
keys. ``split`` then gives one key per direction. The objects follow the
specification's CipherState, SymmetricState and HandshakeState one to one, so
they can be read against it and are checked against the published test vectors.

Errors (a tag that does not verify, a message of the wrong length, a low-order
public key) raise :class:`NoiseError`; a failed HandshakeState must be thrown
away, as the specification says.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal, TypeAlias

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "DH_LENGTH",
    "HASH_LENGTH",
    "MAX_NONCE",
    "TAG_LENGTH",
    "CipherState",
    "HandshakeState",
    "NoiseError",
    "Pattern",
    "SymmetricState",
    "protocol_name",
]

DH_LENGTH = 32
HASH_LENGTH = 32
TAG_LENGTH = 16
MAX_NONCE = (1 << 64) - 1
"""Reserved by the specification: a CipherState refuses to use it."""
MAX_MESSAGE_LENGTH = 65535

Pattern: TypeAlias = Literal["NX", "NK"]

_Token: TypeAlias = Literal["e", "s", "ee", "es", "se", "ss"]
_MESSAGES: dict[str, tuple[tuple[_Token, ...], ...]] = {
    "NX": (("e",), ("e", "ee", "s", "es")),
    "NK": (("e", "es"), ("e", "ee")),
}
_RESPONDER_STATIC_KNOWN = {"NX": False, "NK": True}


class NoiseError(Exception):
    """A Noise message failed to decrypt or parse, or a state was misused."""


def protocol_name(pattern: Pattern) -> bytes:
    return f"Noise_{pattern}_25519_ChaChaPoly_SHA256".encode()


def _hash(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _hkdf(chaining_key: bytes, input_key_material: bytes, outputs: Literal[2, 3]) -> tuple[bytes, ...]:
    """The specification's HKDF (HMAC-SHA256 with the chaining key as salt), 2 or 3 outputs."""
    temp_key = _hmac(chaining_key, input_key_material)
    out1 = _hmac(temp_key, b"\x01")
    out2 = _hmac(temp_key, out1 + b"\x02")
    if outputs == 2:
        return out1, out2
    return out1, out2, _hmac(temp_key, out2 + b"\x03")


def _dh(private_key: X25519PrivateKey, public_key: bytes) -> bytes:
    try:
        return private_key.exchange(X25519PublicKey.from_public_bytes(public_key))
    except ValueError as exc:  # a low-order point gives an all-zero secret, which the library refuses
        raise NoiseError("unusable public key") from exc


def _public(private_key: X25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes_raw()


class CipherState:
    """A key and a nonce counter; without a key it passes data through, as the specification says."""

    def __init__(self, key: bytes | None = None) -> None:
        self._aead: ChaCha20Poly1305 | None = None
        self.nonce = 0
        self.initialize_key(key)

    def initialize_key(self, key: bytes | None) -> None:
        self._aead = ChaCha20Poly1305(key) if key is not None else None
        self.nonce = 0

    def has_key(self) -> bool:
        return self._aead is not None

    def _next_nonce(self) -> bytes:
        if self.nonce >= MAX_NONCE:
            raise NoiseError("nonce space exhausted")
        nonce = b"\x00\x00\x00\x00" + self.nonce.to_bytes(8, "little")
        self.nonce += 1
        return nonce

    def encrypt_with_ad(self, ad: bytes, plaintext: bytes) -> bytes:
        if self._aead is None:
            return plaintext
        return self._aead.encrypt(self._next_nonce(), plaintext, ad)

    def decrypt_with_ad(self, ad: bytes, ciphertext: bytes) -> bytes:
        """Raises NoiseError on a bad tag; the nonce advances only on success."""
        if self._aead is None:
            return ciphertext
        if self.nonce >= MAX_NONCE:
            raise NoiseError("nonce space exhausted")
        nonce = b"\x00\x00\x00\x00" + self.nonce.to_bytes(8, "little")
        try:
            plaintext = self._aead.decrypt(nonce, ciphertext, ad)
        except InvalidTag:
            raise NoiseError("authentication tag does not verify") from None
        self.nonce += 1
        return plaintext


class SymmetricState:
    """Chaining key and handshake hash: everything sent or received is mixed into one or the other."""

    def __init__(self, name: bytes) -> None:
        self.h = name.ljust(HASH_LENGTH, b"\x00") if len(name) <= HASH_LENGTH else _hash(name)
        self.ck = self.h
        self.cipher = CipherState()

    def mix_key(self, input_key_material: bytes) -> None:
        self.ck, temp_key = _hkdf(self.ck, input_key_material, 2)
        self.cipher.initialize_key(temp_key)

    def mix_hash(self, data: bytes) -> None:
        self.h = _hash(self.h + data)

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        ciphertext = self.cipher.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(ciphertext)
        return ciphertext

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        plaintext = self.cipher.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return plaintext

    def split(self) -> tuple[CipherState, CipherState]:
        """(initiator -> responder, responder -> initiator)."""
        key1, key2 = _hkdf(self.ck, b"", 2)
        return CipherState(key1), CipherState(key2)


class HandshakeState:
    """One side of an NX or NK handshake.

    ``ephemeral`` is for tests (fixed keys of the test vectors); left out, a fresh key is made when sent.
    """

    def __init__(
        self,
        pattern: Pattern,
        *,
        initiator: bool,
        prologue: bytes,
        static: X25519PrivateKey | None = None,
        remote_static: bytes | None = None,
        ephemeral: X25519PrivateKey | None = None,
    ) -> None:
        if pattern not in _MESSAGES:
            raise NoiseError(f"unsupported pattern {pattern!r}")
        if not initiator and static is None:
            raise NoiseError("the responder needs its static key")
        if initiator and _RESPONDER_STATIC_KNOWN[pattern] and (remote_static is None or len(remote_static) != 32):
            raise NoiseError(f"{pattern} needs the responder's static public key beforehand")
        self.pattern = pattern
        self.initiator = initiator
        self.symmetric = SymmetricState(protocol_name(pattern))
        self.symmetric.mix_hash(prologue)
        self._s = static
        self._e = ephemeral
        self.remote_static = remote_static if initiator else None
        self.remote_ephemeral: bytes | None = None
        if _RESPONDER_STATIC_KNOWN[pattern]:
            if initiator:
                assert remote_static is not None
                self.symmetric.mix_hash(remote_static)
            else:
                assert static is not None
                self.symmetric.mix_hash(_public(static))
        self._index = 0
        self._split: tuple[CipherState, CipherState] | None = None

    @property
    def finished(self) -> bool:
        return self._split is not None

    @property
    def handshake_hash(self) -> bytes:
        return self.symmetric.h

    @property
    def ephemeral_public(self) -> bytes | None:
        return _public(self._e) if self._e is not None else None

    def _my_turn(self) -> bool:
        return (self._index % 2 == 0) == self.initiator

    def _mix_dh(self, token: _Token) -> None:
        # "es": initiator's ephemeral with responder's static; "se" the other way round.
        if token == "ee":
            mine, theirs = self._e, self.remote_ephemeral
        elif token == "es":
            mine, theirs = (self._e, self.remote_static) if self.initiator else (self._s, self.remote_ephemeral)
        elif token == "se":
            mine, theirs = (self._s, self.remote_ephemeral) if self.initiator else (self._e, self.remote_static)
        else:
            mine, theirs = self._s, self.remote_static
        if mine is None or theirs is None:
            raise NoiseError(f"token {token!r} lacks a key")
        self.symmetric.mix_key(_dh(mine, theirs))

    def _advance(self) -> None:
        self._index += 1
        if self._index == len(_MESSAGES[self.pattern]):
            self._split = self.symmetric.split()

    def write_message(self, payload: bytes = b"") -> bytes:
        if self.finished or not self._my_turn():
            raise NoiseError("not this side's turn to write")
        out = bytearray()
        for token in _MESSAGES[self.pattern][self._index]:
            if token == "e":
                if self._e is None:
                    self._e = X25519PrivateKey.generate()
                public = _public(self._e)
                out += public
                self.symmetric.mix_hash(public)
            elif token == "s":
                if self._s is None:
                    raise NoiseError("no static key to send")
                out += self.symmetric.encrypt_and_hash(_public(self._s))
            else:
                self._mix_dh(token)
        out += self.symmetric.encrypt_and_hash(payload)
        if len(out) > MAX_MESSAGE_LENGTH:
            raise NoiseError("message longer than Noise allows")
        self._advance()
        return bytes(out)

    def read_message(self, message: bytes) -> bytes:
        """The payload; NoiseError when the message is short, forged or made under another transcript.

        Unlike the specification, a failed read leaves the state as it was: over a datagram network anyone can
        send a forged message, and the real one may still come (the caller counts and ignores the forgery).
        """
        saved = self._save()
        try:
            return self._read_message(message)
        except NoiseError:
            self._restore(saved)
            raise

    def _save(self) -> tuple[object, ...]:
        cipher = self.symmetric.cipher
        return (
            self.symmetric.h,
            self.symmetric.ck,
            cipher._aead,
            cipher.nonce,
            self.remote_ephemeral,
            self.remote_static,
            self._index,
            self._split,
        )

    def _restore(self, saved: tuple[object, ...]) -> None:
        cipher = self.symmetric.cipher
        (
            self.symmetric.h,
            self.symmetric.ck,
            cipher._aead,
            cipher.nonce,
            self.remote_ephemeral,
            self.remote_static,
            self._index,
            self._split,
        ) = saved  # type: ignore[assignment]

    def _read_message(self, message: bytes) -> bytes:
        if self.finished or self._my_turn():
            raise NoiseError("not this side's turn to read")
        if len(message) > MAX_MESSAGE_LENGTH:
            raise NoiseError("message longer than Noise allows")
        rest = bytes(message)
        for token in _MESSAGES[self.pattern][self._index]:
            if token == "e":
                if len(rest) < DH_LENGTH:
                    raise NoiseError("message too short for an ephemeral key")
                self.remote_ephemeral, rest = rest[:DH_LENGTH], rest[DH_LENGTH:]
                self.symmetric.mix_hash(self.remote_ephemeral)
            elif token == "s":
                length = DH_LENGTH + (TAG_LENGTH if self.symmetric.cipher.has_key() else 0)
                if len(rest) < length:
                    raise NoiseError("message too short for a static key")
                self.remote_static = self.symmetric.decrypt_and_hash(rest[:length])
                rest = rest[length:]
            else:
                self._mix_dh(token)
        if self.symmetric.cipher.has_key() and len(rest) < TAG_LENGTH:
            raise NoiseError("message too short for its tag")
        payload = self.symmetric.decrypt_and_hash(rest)
        self._advance()
        return payload

    def export_key(self, label: bytes, length: int = 32) -> bytes:
        """A key of its own for ``label`` once the handshake is over: HKDF-SHA256 of the final chaining key
        (secret, shared by both sides only) salted with the handshake hash (the whole transcript).

        Why: keys for another use (sealed connections) must not be ``split``'s keys, and distinct labels give
        independent keys; the Noise specification leaves such derivations to the application (section 11)."""
        if self._split is None:
            raise NoiseError("the handshake is not finished")
        return HKDF(
            algorithm=hashes.SHA256(), length=length, salt=self.symmetric.h, info=b"endpoint export " + label
        ).derive(self.symmetric.ck)

    def split(self) -> tuple[CipherState, CipherState]:
        """(send, receive) cipher states for this side once the last message went by."""
        if self._split is None:
            raise NoiseError("the handshake is not finished")
        to_responder, to_initiator = self._split
        return (to_responder, to_initiator) if self.initiator else (to_initiator, to_responder)
