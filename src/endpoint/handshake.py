"""Connection handshake of the end points: codecs and state machines over bytes, no I/O.

HELLO carries the client's X25519 key; the server answers HELLO_ACK with the
grant (ids, limits) sealed under a key only the two ends can derive, so a third
party can neither read nor forge it. DONE proves the client holds that key, so
nobody else can complete its handshake, and DONE_ACK proves the same of the
server. Every sealed payload is bound (AEAD associated data) to its message kind
and connect key, so a ciphertext can't be moved to another message.

Whatever arrives from the network is untrusted: ``receive`` never raises, it
drops malformed, forged, replayed or unexpected packets and counts them by cause
in ``stats``. Memory stays bounded under floods: pending handshakes are capped
in total and per source, and the replay cache is capped in age and size.

Time is passed in as ``now_ns``. HELLO carries the client's wall clock (ms) and
the server compares it with its own ``now_ns``, so both sides must use epoch
time (``time.time_ns()``) and clocks must agree to within the replay window.
"""

from __future__ import annotations

import enum
import hmac
import os
import secrets
import struct
from collections import OrderedDict
from typing import Literal, TypeAlias

import attrs
import msgpack  # type: ignore[import-untyped]
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from endpoint.errors import ConfigurationError, HandshakeError, RejectReason

__all__ = [
    "KEY_LENGTH",
    "MAGIC",
    "MAX_PACKET_LENGTH",
    "MAX_TAG_LENGTH",
    "MAX_TEXT_LENGTH",
    "NONCE_LENGTH",
    "PROTOCOL_VERSION",
    "Accepted",
    "ClientHandshake",
    "Completed",
    "Done",
    "Grant",
    "HandshakeStats",
    "Hello",
    "Kind",
    "Rejected",
    "Reply",
    "ServerHandshake",
    "answer_key",
    "unsealed_reject",
]

PROTOCOL_VERSION = 1
MAGIC = 0xE9D0
MAX_PACKET_LENGTH = 4096
"""Longer packets are malformed; also caps what the encoders may produce."""
KEY_LENGTH = 32
NONCE_LENGTH = 12
MAX_TAG_LENGTH = 32
MAX_TEXT_LENGTH = 256
"""REJECT texts are cut to this many characters; the text travels twice (plain and sealed)."""

_GCM_TAG_LENGTH = 16
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_U32_MAX = (1 << 32) - 1
_INFO_PREFIX = b"endpoint-handshake-v1"
_AAD = struct.Struct("<HBQ")

Reply: TypeAlias = dict[str, int | str]
"""How the server reaches the client (e.g. reply stream id, port); opaque to this module."""
Grant: TypeAlias = dict[str, int | str | bytes | bool]
"""What the server hands the client (ids, timeouts, ...); opaque except for the int ``connection_id``."""


class Kind(enum.IntEnum):
    HELLO = 1
    HELLO_ACK = 2
    REJECT = 3
    DONE = 4
    DONE_ACK = 5


_ANSWER_KINDS = frozenset((Kind.HELLO_ACK, Kind.REJECT, Kind.DONE_ACK))


# ---------------------------------------------------------------------------------------------------------------------
# Results handed to the glue


@attrs.frozen
class Hello:
    """A fresh client asked to connect; the glue decides (version, registrations, limits) and calls accept/reject."""

    connect_key: int
    client_public: bytes
    registration_hash: bytes
    reply: Reply
    tag: str
    source: str
    protocol_version: int


@attrs.frozen
class Done:
    """The client proved it holds the key and has set up its side; the glue starts the connection and calls complete."""

    connect_key: int
    connection_id: int


@attrs.frozen
class Accepted:
    server_public: bytes
    grant: Grant


@attrs.frozen
class Rejected:
    """``authenticated`` is False when the rejection could have come from anyone on the path."""

    reason: RejectReason
    text: str
    authenticated: bool


@attrs.frozen
class Completed:
    connection_id: int


@attrs.define
class HandshakeStats:
    """``received`` counts every packet handed in; the others count drops by cause."""

    received: int = 0
    malformed: int = 0
    replayed: int = 0
    spoofed: int = 0
    unknown: int = 0
    expired: int = 0
    overloaded: int = 0


# ---------------------------------------------------------------------------------------------------------------------
# Codec (raises HandshakeError; only the state machines turn that into counted drops)


@attrs.frozen
class _HelloMsg:
    protocol_version: int
    connect_key: int
    client_public: bytes
    registration_hash: bytes
    reply: Reply
    tag: str
    timestamp_ms: int


@attrs.frozen
class _HelloAckMsg:
    connect_key: int
    server_public: bytes
    nonce: bytes
    sealed: bytes


@attrs.frozen
class _RejectMsg:
    connect_key: int
    server_public: bytes | None
    nonce: bytes | None
    sealed: bytes | None
    reason: RejectReason
    text: str


@attrs.frozen
class _SealedMsg:
    """DONE or DONE_ACK: everything but the connect key is sealed."""

    kind: Literal[Kind.DONE, Kind.DONE_ACK]
    connect_key: int
    nonce: bytes
    sealed: bytes


_Message: TypeAlias = _HelloMsg | _HelloAckMsg | _RejectMsg | _SealedMsg


def _pack(value: object) -> bytes:
    data = msgpack.packb(value, use_bin_type=True)
    assert isinstance(data, bytes)
    return data


def _unpack(data: bytes) -> object:
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises a zoo of types on garbage; all mean "malformed"
        raise HandshakeError(f"undecodable packet: {exc.__class__.__name__}") from exc


def answer_key(data: bytes | memoryview) -> int | None:
    """The connect key a server's answer names, None if it is no answer: lets one reader hand the answers on a
    shared stream to the handshakes they concern (each then opens only its own)."""
    if len(data) > MAX_PACKET_LENGTH:
        return None
    try:
        fields = _unpack(bytes(data))
    except HandshakeError:
        return None
    if (
        type(fields) is list
        and len(fields) > 2
        and fields[0] == MAGIC
        and fields[1] in _ANSWER_KINDS
        and type(fields[2]) is int
    ):
        return fields[2]
    return None


def _int(value: object, low: int, high: int, what: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise HandshakeError(f"{what} must be an int in [{low}, {high}], got {value!r:.40}")
    return value


def _bytes(value: object, length: int, what: str) -> bytes:
    if type(value) is not bytes or len(value) != length:
        raise HandshakeError(f"{what} must be {length} bytes")
    return value


def _sealed_bytes(value: object) -> bytes:
    if type(value) is not bytes or len(value) < _GCM_TAG_LENGTH:
        raise HandshakeError("sealed payload must be bytes of at least the AEAD tag length")
    return value


def _str(value: object, max_length: int, what: str) -> str:
    if type(value) is not str or len(value) > max_length:
        raise HandshakeError(f"{what} must be a str of at most {max_length} characters")
    return value


def _reason(value: object) -> RejectReason:
    try:
        return RejectReason(_int(value, 0, _U32_MAX, "reject reason"))
    except ValueError as exc:
        raise HandshakeError(f"unknown reject reason {value!r}") from exc


def _reply(value: object) -> Reply:
    if type(value) is not dict:
        raise HandshakeError("reply must be a map")
    for key, item in value.items():
        if type(key) is not str or type(item) not in (int, str):
            raise HandshakeError("reply must map str to int or str")
    return value


def _grant(value: object) -> Grant:
    if type(value) is not dict:
        raise HandshakeError("grant must be a map")
    for key, item in value.items():
        if type(key) is not str or type(item) not in (int, str, bytes, bool):
            raise HandshakeError("grant must map str to int, str, bytes or bool")
    if type(value.get("connection_id")) is not int:
        raise HandshakeError("grant must hold an int connection_id")
    return value


def _connect_key(value: object) -> int:
    return _int(value, 1, _U64_MAX, "connect key")


def _decode(data: bytes | memoryview) -> _Message:
    if len(data) > MAX_PACKET_LENGTH:
        raise HandshakeError(f"packet longer than {MAX_PACKET_LENGTH} bytes")
    fields = _unpack(bytes(data))
    if type(fields) is not list or len(fields) < 2 or fields[0] != MAGIC or type(fields[0]) is not int:
        raise HandshakeError("not a handshake packet")
    kind = fields[1]
    n = len(fields)
    if kind == Kind.HELLO and type(kind) is int:
        version = _int(fields[2] if n > 2 else None, 0, _U32_MAX, "protocol version")
        # Another version may append fields; reading the common prefix still lets the glue answer VERSION_MISMATCH.
        if n < 9 or (n > 9 and version == PROTOCOL_VERSION):
            raise HandshakeError("HELLO has the wrong number of fields")
        return _HelloMsg(
            protocol_version=version,
            connect_key=_connect_key(fields[3]),
            client_public=_bytes(fields[4], KEY_LENGTH, "client public key"),
            registration_hash=_bytes(fields[5], 32, "registration hash"),
            reply=_reply(fields[6]),
            tag=_str(fields[7], MAX_TAG_LENGTH, "tag"),
            timestamp_ms=_int(fields[8], 0, (1 << 63) - 1, "timestamp"),
        )
    if kind == Kind.HELLO_ACK and type(kind) is int and n == 6:
        return _HelloAckMsg(
            connect_key=_connect_key(fields[2]),
            server_public=_bytes(fields[3], KEY_LENGTH, "server public key"),
            nonce=_bytes(fields[4], NONCE_LENGTH, "nonce"),
            sealed=_sealed_bytes(fields[5]),
        )
    if kind == Kind.REJECT and type(kind) is int and n == 8:
        connect_key = _connect_key(fields[2])
        if fields[3] is None and fields[4] is None and fields[5] is None:
            server_public, nonce, sealed = None, None, None
        else:
            server_public = _bytes(fields[3], KEY_LENGTH, "server public key")
            nonce = _bytes(fields[4], NONCE_LENGTH, "nonce")
            sealed = _sealed_bytes(fields[5])
        return _RejectMsg(
            connect_key=connect_key,
            server_public=server_public,
            nonce=nonce,
            sealed=sealed,
            reason=_reason(fields[6]),
            text=_str(fields[7], MAX_TEXT_LENGTH, "reject text"),
        )
    if kind in (Kind.DONE, Kind.DONE_ACK) and type(kind) is int and n == 5:
        return _SealedMsg(
            kind=Kind.DONE if kind == Kind.DONE else Kind.DONE_ACK,
            connect_key=_connect_key(fields[2]),
            nonce=_bytes(fields[3], NONCE_LENGTH, "nonce"),
            sealed=_sealed_bytes(fields[4]),
        )
    raise HandshakeError(f"unknown handshake kind or wrong field count: kind {kind!r:.20}, {n} fields")


def _aad(kind: Kind, connect_key: int) -> bytes:
    return _AAD.pack(MAGIC, kind, connect_key)


def _derive(
    private_key: X25519PrivateKey, peer_public: bytes, client_public: bytes, server_public: bytes, connect_key: int
) -> AESGCM:
    """Key for one handshake: bound to both public keys and the connect key, so no two handshakes share one."""
    try:
        shared = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:  # low-order point: the shared secret would be all zeros
        raise HandshakeError("peer public key is unusable") from exc
    info = _INFO_PREFIX + client_public + server_public + connect_key.to_bytes(8, "little")
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared))


def _seal(aead: AESGCM, kind: Kind, connect_key: int, payload: object) -> tuple[bytes, bytes]:
    nonce = os.urandom(NONCE_LENGTH)
    return nonce, aead.encrypt(nonce, _pack(payload), _aad(kind, connect_key))


def _open(aead: AESGCM, kind: Kind, connect_key: int, nonce: bytes, sealed: bytes) -> object | None:
    """None when the tag does not verify (forged, tampered or another key); HandshakeError when it does but is junk."""
    try:
        plain = aead.decrypt(nonce, sealed, _aad(kind, connect_key))
    except InvalidTag:
        return None
    return _unpack(plain)


def _single_int(payload: object) -> int:
    if type(payload) is not list or len(payload) != 1:
        raise HandshakeError("sealed payload must be [connection_id]")
    return _int(payload[0], _I64_MIN, _U64_MAX, "connection id")


def _checked_length(data: bytes, what: str) -> bytes:
    if len(data) > MAX_PACKET_LENGTH:
        raise ValueError(f"{what} would be {len(data)} bytes, over the {MAX_PACKET_LENGTH}-byte packet limit")
    return data


def _reject_packet(
    connect_key: int, reason: RejectReason, text: str, server_public: bytes | None, aead: AESGCM | None
) -> bytes:
    text = text[:MAX_TEXT_LENGTH]
    if aead is None or server_public is None:
        return _pack([MAGIC, Kind.REJECT, connect_key, None, None, None, int(reason), text])
    nonce, sealed = _seal(aead, Kind.REJECT, connect_key, [int(reason), text])
    return _pack([MAGIC, Kind.REJECT, connect_key, server_public, nonce, sealed, int(reason), text])


def unsealed_reject(connect_key: int, reason: RejectReason, text: str) -> bytes:
    """A REJECT for when no key exists yet; the client reports it as unauthenticated, since anyone could send it."""
    return _reject_packet(_connect_key(connect_key), RejectReason(reason), text, None, None)


# ---------------------------------------------------------------------------------------------------------------------
# Server


_ServerState: TypeAlias = Literal["hello", "acked", "done"]


@attrs.define
class _Pending:
    client_public: bytes
    source: str
    aead: AESGCM
    updated_ns: int
    state: _ServerState = "hello"
    connection_id: int | None = None
    reply: bytes | None = None


@attrs.define
class _Finished:
    """A handshake answered for good (REJECT or DONE_ACK), kept briefly so a client whose answer was lost can retry."""

    client_public: bytes
    aead: AESGCM
    connection_id: int | None
    reply: bytes
    updated_ns: int


class ServerHandshake:
    """Server side of every handshake in flight on one end point."""

    def __init__(
        self,
        private_key: X25519PrivateKey,
        *,
        protocol_version: int = PROTOCOL_VERSION,
        handshake_timeout_ns: int,
        replay_window_ns: int,
        max_pending: int,
        max_pending_per_source: int,
        max_seen: int = 65536,
    ) -> None:
        for name, value in (
            ("handshake_timeout_ns", handshake_timeout_ns),
            ("replay_window_ns", replay_window_ns),
            ("max_pending", max_pending),
            ("max_pending_per_source", max_pending_per_source),
            ("max_seen", max_seen),
        ):
            if value <= 0:
                raise ConfigurationError(f"{name} must be > 0, got {value}")
        self._private_key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes_raw()
        self.protocol_version = protocol_version
        self.handshake_timeout_ns = handshake_timeout_ns
        self.replay_window_ns = replay_window_ns
        self.max_pending = max_pending
        self.max_pending_per_source = max_pending_per_source
        self.max_seen = max_seen
        self.stats = HandshakeStats()
        self.retried: int | None = None
        """Connect key of the retry (duplicate HELLO or DONE) the last ``receive`` saw; resend ``last_reply`` to it."""
        self._pending: dict[int, _Pending] = {}
        self._per_source: dict[str, int] = {}
        self._finished: OrderedDict[int, _Finished] = OrderedDict()
        self._seen: OrderedDict[int, int] = OrderedDict()  # connect key -> first seen ns, oldest first

    # -- network side ---------------------------------------------------------------------------------------------

    def receive(self, data: bytes | memoryview, source: str, now_ns: int) -> Hello | Done | None:
        """Feed one packet from ``source``; a result means the glue has to act, None means dropped or retried."""
        self.stats.received += 1
        self.retried = None
        try:
            message = _decode(data)
            if isinstance(message, _HelloMsg):
                return self._on_hello(message, source, now_ns)
            if isinstance(message, _SealedMsg) and message.kind == Kind.DONE:
                return self._on_done(message, now_ns)
            raise HandshakeError("a client sent a server-only message kind")
        except HandshakeError:
            self.stats.malformed += 1
            return None

    def _on_hello(self, message: _HelloMsg, source: str, now_ns: int) -> Hello | None:
        key = message.connect_key
        if abs(message.timestamp_ms * 1_000_000 - now_ns) > self.replay_window_ns:
            self.stats.replayed += 1
            return None
        known = self._pending.get(key) or self._finished.get(key)
        if known is not None:
            if hmac.compare_digest(known.client_public, message.client_public):
                self.retried = key
            else:
                self.stats.replayed += 1
            return None
        self._prune_seen(now_ns)
        if key in self._seen:
            self.stats.replayed += 1
            return None
        if len(self._pending) >= self.max_pending or self._per_source.get(source, 0) >= self.max_pending_per_source:
            self.stats.overloaded += 1
            return None
        aead = _derive(self._private_key, message.client_public, message.client_public, self.public_key, key)
        self._pending[key] = _Pending(message.client_public, source, aead, now_ns)
        self._per_source[source] = self._per_source.get(source, 0) + 1
        self._seen[key] = now_ns
        while len(self._seen) > self.max_seen:
            self._seen.popitem(last=False)
        return Hello(
            connect_key=key,
            client_public=message.client_public,
            registration_hash=message.registration_hash,
            reply=message.reply,
            tag=message.tag,
            source=source,
            protocol_version=message.protocol_version,
        )

    def _on_done(self, message: _SealedMsg, now_ns: int) -> Done | None:
        key = message.connect_key
        entry = self._pending.get(key)
        finished = self._finished.get(key) if entry is None else None
        if entry is not None and entry.state != "hello":
            aead, granted = entry.aead, entry.connection_id
        elif finished is not None and finished.connection_id is not None:
            aead, granted = finished.aead, finished.connection_id
        else:
            self.stats.unknown += 1
            return None
        payload = _open(aead, Kind.DONE, key, message.nonce, message.sealed)
        if payload is None:
            self.stats.spoofed += 1
            return None
        if _single_int(payload) != granted:
            raise HandshakeError("DONE names another connection id than the one granted")
        if entry is None or entry.state == "done":
            self.retried = key
            return None
        entry.state = "done"
        entry.reply = None
        entry.updated_ns = now_ns
        return Done(connect_key=key, connection_id=granted)

    def _prune_seen(self, now_ns: int) -> None:
        # A HELLO stamped up to one window ahead stays acceptable until one window after that.
        horizon = now_ns - 2 * self.replay_window_ns
        while self._seen:
            oldest_key = next(iter(self._seen))
            if self._seen[oldest_key] >= horizon:
                break
            del self._seen[oldest_key]

    # -- glue side ------------------------------------------------------------------------------------------------

    def accept(self, connect_key: int, grant: Grant, now_ns: int) -> bytes:
        """HELLO_ACK sealing ``grant``; the entry's timeout restarts at ``now_ns``.

        Raises KeyError when the handshake is not pending (expired, abandoned), RuntimeError when it was already
        answered, ValueError for a grant that is not a valid grant or does not fit in one packet.
        """
        entry = self._pending[connect_key]
        if entry.state != "hello":
            raise RuntimeError(f"handshake {connect_key:#x} was already accepted")
        try:
            connection_id = _grant(grant)["connection_id"]
        except HandshakeError as exc:
            raise ValueError(str(exc)) from exc
        assert type(connection_id) is int
        nonce, sealed = _seal(entry.aead, Kind.HELLO_ACK, connect_key, grant)
        packet = _checked_length(
            _pack([MAGIC, Kind.HELLO_ACK, connect_key, self.public_key, nonce, sealed]), "HELLO_ACK"
        )
        entry.state = "acked"
        entry.connection_id = connection_id
        entry.reply = packet
        entry.updated_ns = now_ns
        return packet

    def reject(self, connect_key: int, reason: RejectReason, text: str) -> bytes:
        """Sealed REJECT (``text`` cut to MAX_TEXT_LENGTH); ends the handshake. KeyError when it is not pending."""
        entry = self._remove(connect_key)
        packet = _reject_packet(connect_key, RejectReason(reason), text, self.public_key, entry.aead)
        self._remember_finished(connect_key, entry, None, packet)
        return packet

    def complete(self, connect_key: int) -> bytes:
        """DONE_ACK; ends the handshake. KeyError when it is not pending, RuntimeError before DONE arrived."""
        entry = self._pending[connect_key]
        if entry.state != "done" or entry.connection_id is None:
            raise RuntimeError(f"handshake {connect_key:#x} has not received DONE")
        nonce, sealed = _seal(entry.aead, Kind.DONE_ACK, connect_key, [entry.connection_id])
        packet = _pack([MAGIC, Kind.DONE_ACK, connect_key, nonce, sealed])
        self._remove(connect_key)
        self._remember_finished(connect_key, entry, entry.connection_id, packet)
        return packet

    def abandon(self, connect_key: int) -> None:
        """Forget a pending handshake without answering (the glue could not set it up); unknown keys are ignored."""
        if connect_key in self._pending:
            self._remove(connect_key)

    def expire(self, now_ns: int) -> list[int]:
        """Drop handshakes idle for longer than the timeout; the glue frees whatever it set up for the returned keys."""
        deadline = now_ns - self.handshake_timeout_ns
        expired = [key for key, entry in self._pending.items() if entry.updated_ns < deadline]
        for key in expired:
            self._remove(key)
        self.stats.expired += len(expired)
        for key in [key for key, done in self._finished.items() if done.updated_ns < deadline]:
            del self._finished[key]
        self._prune_seen(now_ns)
        return expired

    def last_reply(self, connect_key: int) -> bytes | None:
        """The answer last sent for ``connect_key`` (to resend on a retry), or None when there is none to resend."""
        entry = self._pending.get(connect_key)
        if entry is not None:
            return entry.reply
        finished = self._finished.get(connect_key)
        return finished.reply if finished is not None else None

    def pending_count(self) -> int:
        return len(self._pending)

    def _remove(self, connect_key: int) -> _Pending:
        entry = self._pending.pop(connect_key)
        remaining = self._per_source[entry.source] - 1
        if remaining:
            self._per_source[entry.source] = remaining
        else:
            del self._per_source[entry.source]
        return entry

    def _remember_finished(self, connect_key: int, entry: _Pending, connection_id: int | None, packet: bytes) -> None:
        self._finished[connect_key] = _Finished(
            entry.client_public, entry.aead, connection_id, packet, entry.updated_ns
        )
        while len(self._finished) > self.max_pending:
            self._finished.popitem(last=False)


# ---------------------------------------------------------------------------------------------------------------------
# Client


_ClientState: TypeAlias = Literal["new", "hello_sent", "accepted", "done_sent", "completed", "rejected"]


class ClientHandshake:
    """Client side of one handshake (one connect key); a new connect attempt after a failure uses a new instance."""

    def __init__(
        self,
        *,
        registration_hash: bytes,
        reply: Reply,
        tag: str = "",
        protocol_version: int = PROTOCOL_VERSION,
        private_key: X25519PrivateKey | None = None,
        connect_key: int | None = None,
        expected_server_key: bytes | None = None,
    ) -> None:
        if type(registration_hash) is not bytes or len(registration_hash) != 32:
            raise ConfigurationError("registration_hash must be 32 bytes")
        if type(tag) is not str or len(tag) > MAX_TAG_LENGTH:
            raise ConfigurationError(f"tag must be a str of at most {MAX_TAG_LENGTH} characters, got {tag!r}")
        if expected_server_key is not None and (
            type(expected_server_key) is not bytes or len(expected_server_key) != 32
        ):
            raise ConfigurationError("expected_server_key must be 32 bytes or None")
        if connect_key is None:
            connect_key = secrets.randbelow(_U64_MAX) + 1
        try:
            _reply(reply)
            _int(protocol_version, 0, _U32_MAX, "protocol_version")
            _connect_key(connect_key)
        except HandshakeError as exc:
            raise ConfigurationError(str(exc)) from exc
        self._private_key = private_key if private_key is not None else X25519PrivateKey.generate()
        self.public_key: bytes = self._private_key.public_key().public_bytes_raw()
        self.connect_key: int = connect_key
        self.registration_hash = registration_hash
        self.reply = dict(reply)
        self.tag = tag
        self.protocol_version = protocol_version
        self.expected_server_key = expected_server_key
        self.stats = HandshakeStats()
        self.server_public: bytes | None = None
        self.grant: Grant | None = None
        self._aead: AESGCM | None = None
        self._state: _ClientState = "new"
        if len(self._hello_packet((1 << 63) - 1)) > MAX_PACKET_LENGTH:
            raise ConfigurationError(f"reply and tag make HELLO longer than {MAX_PACKET_LENGTH} bytes")

    @property
    def state(self) -> _ClientState:
        return self._state

    @property
    def connection_id(self) -> int | None:
        if self.grant is None:
            return None
        connection_id = self.grant["connection_id"]
        assert type(connection_id) is int
        return connection_id

    def hello(self, now_ns: int) -> bytes:
        """HELLO stamped with ``now_ns`` (epoch); call again to retry with the same connect key."""
        if self._state not in ("new", "hello_sent"):
            raise RuntimeError(f"HELLO makes no sense in state {self._state!r}")
        self._state = "hello_sent"
        return self._hello_packet(now_ns // 1_000_000)

    def _hello_packet(self, timestamp_ms: int) -> bytes:
        return _pack(
            [
                MAGIC,
                Kind.HELLO,
                self.protocol_version,
                self.connect_key,
                self.public_key,
                self.registration_hash,
                self.reply,
                self.tag,
                timestamp_ms,
            ]
        )

    def done(self) -> bytes:
        """DONE sealed with the handshake key (fresh nonce each call, so it may be resent)."""
        if self._state not in ("accepted", "done_sent") or self._aead is None:
            raise RuntimeError(f"DONE makes no sense in state {self._state!r}")
        self._state = "done_sent"
        nonce, sealed = _seal(self._aead, Kind.DONE, self.connect_key, [self.connection_id])
        return _pack([MAGIC, Kind.DONE, self.connect_key, nonce, sealed])

    def receive(self, data: bytes | memoryview) -> Accepted | Rejected | Completed | None:
        """Feed one packet from the server; None means nothing to do (dropped, counted in ``stats``, or a duplicate)."""
        self.stats.received += 1
        try:
            message = _decode(data)
            if isinstance(message, _HelloMsg) or (isinstance(message, _SealedMsg) and message.kind == Kind.DONE):
                raise HandshakeError("the server sent a client-only message kind")
            if message.connect_key != self.connect_key:
                self.stats.unknown += 1
                return None
            if isinstance(message, _HelloAckMsg):
                return self._on_hello_ack(message)
            if isinstance(message, _RejectMsg):
                return self._on_reject(message)
            return self._on_done_ack(message)
        except HandshakeError:
            self.stats.malformed += 1
            return None

    def _derive(self, server_public: bytes) -> AESGCM:
        return _derive(self._private_key, server_public, self.public_key, server_public, self.connect_key)

    def _on_hello_ack(self, message: _HelloAckMsg) -> Accepted | Rejected | None:
        if self._state in ("accepted", "done_sent"):
            return None  # the server resent its answer to a HELLO retry; DONE is (re)sent on the glue's timer
        if self._state != "hello_sent":
            self.stats.unknown += 1
            return None
        aead = self._derive(message.server_public)
        payload = _open(aead, Kind.HELLO_ACK, self.connect_key, message.nonce, message.sealed)
        if payload is None:
            self.stats.spoofed += 1
            return None
        grant = _grant(payload)
        # Anyone on the path can seal a grant with a key of their own; only the pinned server key tells them apart.
        if self.expected_server_key is not None and not hmac.compare_digest(
            self.expected_server_key, message.server_public
        ):
            self._state = "rejected"
            return Rejected(
                RejectReason.SERVER_KEY_CHANGED,
                f"server public key {message.server_public.hex()} differs from the stored "
                f"{self.expected_server_key.hex()}",
                authenticated=True,
            )
        self._aead = aead
        self.server_public = message.server_public
        self.grant = grant
        self._state = "accepted"
        return Accepted(server_public=message.server_public, grant=grant)

    def _on_reject(self, message: _RejectMsg) -> Rejected | None:
        if self._state not in ("hello_sent", "accepted", "done_sent"):
            self.stats.unknown += 1
            return None
        if message.server_public is None or message.nonce is None or message.sealed is None:
            return Rejected(message.reason, message.text, authenticated=False)
        aead = self._aead if self.server_public == message.server_public else None
        payload = _open(
            aead or self._derive(message.server_public), Kind.REJECT, self.connect_key, message.nonce, message.sealed
        )
        if payload is None or payload != [int(message.reason), message.text]:
            self.stats.spoofed += 1
            return None
        trusted_key = self.server_public or self.expected_server_key
        authenticated = trusted_key is None or hmac.compare_digest(trusted_key, message.server_public)
        if authenticated:
            self._state = "rejected"
        return Rejected(message.reason, message.text, authenticated=authenticated)

    def _on_done_ack(self, message: _SealedMsg) -> Completed | None:
        if self._state != "done_sent" or self._aead is None:
            self.stats.unknown += 1
            return None
        payload = _open(self._aead, Kind.DONE_ACK, self.connect_key, message.nonce, message.sealed)
        if payload is None:
            self.stats.spoofed += 1
            return None
        connection_id = _single_int(payload)
        if connection_id != self.connection_id:
            raise HandshakeError("DONE_ACK names another connection id than the one granted")
        self._state = "completed"
        return Completed(connection_id)
