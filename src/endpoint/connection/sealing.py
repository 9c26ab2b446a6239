"""Sealed connections: every message after the handshake under per-direction AEAD keys (sans-IO).

Why: the handshake proves who the peer is, but Aeron's data frames are plain, so an
on-path attacker could read a connection or inject into it. A sealed connection
wraps each message as ``counter (8 bytes, little-endian) || AES-GCM(plaintext)``:

- the nonce is the direction's salt and the counter, which only ever grows, so a
  nonce never repeats under one key;
- the associated data binds the connection id, the stream's session id and the
  direction, so a sealed message can't be moved to another connection, stream or
  direction;
- the opener keeps a sliding window of the last :data:`REPLAY_WINDOW` counters,
  so a replayed message is refused while messages sealed concurrently and offered
  a little out of order still open;
- keys are replaced every :data:`REKEY_INTERVAL` messages (the counter's epoch),
  each the HKDF of the one before, well inside AES-GCM's usage limits, and the old
  key is forgotten once the window has passed it.

A message that does not open is an attack or corruption: the caller closes the
connection (a forged frame would otherwise hold its place in the log).
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from endpoint.errors import SealError

__all__ = [
    "KEY_LENGTH",
    "OVERHEAD",
    "REKEY_INTERVAL",
    "REPLAY_WINDOW",
    "Opener",
    "SealError",
    "Sealer",
]

KEY_LENGTH = 32
TAG_LENGTH = 16
COUNTER_LENGTH = 8
OVERHEAD = COUNTER_LENGTH + TAG_LENGTH
"""Bytes a sealed message adds to its plaintext."""
REKEY_INTERVAL = 1 << 24
"""Messages per key; far below AES-GCM's limit for one key (2^32 messages, NIST SP 800-38D)."""
REPLAY_WINDOW = 64
"""How far behind the highest counter seen a message may still arrive (once)."""
MAX_COUNTER = (1 << 64) - 1
_EPOCH_BITS = 24
assert REKEY_INTERVAL == 1 << _EPOCH_BITS
_WINDOW_MASK = (1 << REPLAY_WINDOW) - 1

_COUNTER = struct.Struct("<Q")
_AAD = struct.Struct("<4sqiB")
_AAD_MAGIC = b"EPsl"


def _next_key(key: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_LENGTH, salt=None, info=b"endpoint rekey").derive(key)


def _check_key(key: bytes) -> bytes:
    if len(key) != KEY_LENGTH:
        raise ValueError(f"a sealing key is {KEY_LENGTH} bytes, got {len(key)}")
    return bytes(key)


def _aad(connection_id: int, session_id: int, direction: int) -> bytes:
    return _AAD.pack(_AAD_MAGIC, connection_id, session_id, direction)


class Sealer:
    """Seals one direction's messages; counters start at 0 and never repeat."""

    __slots__ = ("_aad", "_aead", "_direction", "_epoch", "_key", "_prefix", "counter")

    def __init__(self, key: bytes, *, connection_id: int, session_id: int, direction: int) -> None:
        self._key = _check_key(key)
        self._aead = AESGCM(self._key)
        self._epoch = 0
        self._direction = direction
        self._prefix = direction.to_bytes(4, "little")
        """The nonce is this and the 8 counter bytes the message starts with."""
        self._aad = _aad(connection_id, session_id, direction)
        self.counter = 0
        """The counter the next message is sealed under."""

    def seal(self, plaintext: bytes | bytearray | memoryview) -> bytes:
        """``plaintext`` sealed, with its counter in front; raises :class:`SealError` once counters run out."""
        counter = self.counter
        if counter >> _EPOCH_BITS != self._epoch or counter >= MAX_COUNTER:
            self._rekey(counter)
        self.counter = counter + 1
        head = _COUNTER.pack(counter)
        return head + self._aead.encrypt(self._prefix + head, plaintext, self._aad)

    def _rekey(self, counter: int) -> None:
        if counter >= MAX_COUNTER:
            raise SealError("the connection has sealed as many messages as its counter allows; reconnect")
        epoch = counter >> _EPOCH_BITS
        while self._epoch < epoch:
            self._key = _next_key(self._key)
            self._epoch += 1
        self._aead = AESGCM(self._key)


class Opener:
    """Opens the peer's sealed messages for one direction, refusing replays and forgeries."""

    __slots__ = ("_aad", "_aead_now", "_direction", "_epoch_now", "_keys", "_prefix", "_seen", "highest")

    def __init__(self, key: bytes, *, connection_id: int, session_id: int, direction: int) -> None:
        self._direction = direction
        self._prefix = direction.to_bytes(4, "little")
        self._aad = _aad(connection_id, session_id, direction)
        aead = AESGCM(_check_key(key))
        self._keys: dict[int, tuple[bytes, AESGCM]] = {0: (bytes(key), aead)}
        self._epoch_now = 0
        """The newest epoch a message opened under (its key is ``_aead_now``)."""
        self._aead_now = aead
        self.highest = -1
        """The highest counter opened so far."""
        self._seen = 0
        """Bit ``i`` set: counter ``highest - i`` was opened."""

    def open(self, sealed: bytes | bytearray | memoryview) -> bytes:
        """The plaintext of ``sealed``; raises :class:`SealError` for anything not sealed by the peer once."""
        if len(sealed) < OVERHEAD:
            raise SealError(f"a sealed message is at least {OVERHEAD} bytes, got {len(sealed)}")
        (counter,) = _COUNTER.unpack_from(sealed)
        behind = self.highest - counter
        if behind >= 0:
            if behind >= REPLAY_WINDOW:
                raise SealError(f"message {counter} is older than the replay window")
            if self._seen >> behind & 1:
                raise SealError(f"message {counter} was already received")
        epoch = counter >> _EPOCH_BITS
        if epoch == self._epoch_now:
            key, aead = None, self._aead_now
        else:
            key, aead = self._key_for(epoch)
        view = sealed if type(sealed) is memoryview else memoryview(sealed)
        try:
            plaintext = aead.decrypt(self._prefix + view[:COUNTER_LENGTH], view[COUNTER_LENGTH:], self._aad)
        except InvalidTag:
            raise SealError(f"message {counter} failed authentication") from None
        if key is not None:  # a new epoch's key is kept only once a message under it opened
            self._keys[epoch] = (key, aead)
            if epoch > self._epoch_now:
                self._epoch_now, self._aead_now = epoch, aead
        if behind < 0:
            shift = -behind
            self._seen = ((self._seen << shift) | 1) & _WINDOW_MASK if shift < REPLAY_WINDOW else 1
            self.highest = counter
            if len(self._keys) > 1:
                self._forget_old_keys()
        else:
            self._seen |= 1 << behind
        return plaintext

    def _key_for(self, epoch: int) -> tuple[bytes, AESGCM]:
        keys = self._keys
        entry = keys.get(epoch)
        if entry is not None:
            return entry
        newest = max(keys)
        if epoch != newest + 1:
            # Behind every key still kept, or past the next one: not a message the peer could have sent.
            raise SealError(f"no key for epoch {epoch}")
        key = _next_key(keys[newest][0])
        return key, AESGCM(key)

    def _forget_old_keys(self) -> None:
        oldest_needed = max(self.highest - REPLAY_WINDOW + 1, 0) >> _EPOCH_BITS
        for epoch in [e for e in self._keys if e < oldest_needed]:
            del self._keys[epoch]
