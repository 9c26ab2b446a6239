"""Connection handshake of the end points: codecs and state machines over bytes, no I/O.

The handshake is Noise (see :mod:`endpoint.handshake.noise`): ``NX`` when the client has
no pin for the server, ``NK`` once it has. Around it, as datagrams::

    client                                             server
    HELLO   (Noise msg 1, no cookie)          ->
                                              <-       COOKIE  (stateless: nothing kept, nothing allocated)
    HELLO   (same msg 1, with the cookie)     ->       Noise responder state made only now
                                              <-       ANSWER  (Noise msg 2: grant or sealed rejection)
    DONE    (sealed with client->server key)  ->
                                              <-       DONE_ACK (sealed with server->client key)

What each step proves:

- COOKIE = MAC(rotating server secret; source address, reply route, client
  ephemeral, connect key, time bucket): a HELLO carrying it was sent by
  someone who receives at the address and route it claims (return
  routability), so a flood from forged addresses costs the server no state.
- The prologue binds magic, protocol version, connect key, registration hash,
  message schemas, reply route, tag and the address the client claims to send from: an
  on-path change of any of them gives the two ends different transcripts,
  and the answer does not open. The server also drops a HELLO with a valid
  cookie whose claimed address is not the one it came from, so a HELLO re-sent
  from another address (to steer the connection's stream there) goes nowhere.
  The COOKIE says which address the server saw, and the client claims that one
  from then on (behind a NAT it differs from its own).
- ANSWER: only the holder of the server's static key can make it (``es``);
  it is fresh for this handshake (``ee``, which also gives forward secrecy).
  Its payload is the grant or the sealed rejection reason.
- DONE and DONE_ACK are sealed with Noise's per-direction keys (``split``):
  the client holds its ephemeral key, the server completed the same transcript.
- A buffered session (see :mod:`endpoint.connection.session`; offered by the server in the grant) is claimed in
  DONE: the client's long-lived public key, proof that it holds the private key (a MAC under the X25519
  secret of its key and the server's, over a key exported from this handshake, so it cannot be replayed into
  another), and its :class:`SessionSync`; DONE_ACK answers with the session's id, whether it resumed, and the
  server's sync. A peer that does not know sessions never sends nor gets the extra element.
- A sealed connection (the client asks in HELLO, bound into the prologue;
  the grant says what the server decided) seals its messages under two keys
  of their own, derived from the finished handshake (:class:`SealingKeys`,
  handed out in :class:`Done` and :class:`Completed`).

Whatever arrives from the network is untrusted: ``receive`` never raises, it
drops malformed, forged, replayed or unexpected packets and counts them by
cause in ``stats``. The client believes only answers sealed under its
handshake; an unsealed REJECT is taken as an unauthenticated hint, and only
before the server can hold any key for us (no cookie received yet). Memory
stays bounded under floods: half-open handshakes are capped in total and per
source, and when full the oldest gives way (told ``SERVER_BUSY``, sealed), unless it is the newcomer's own
source's and still young: a host whose many clients connect at once (a burst, every one past its cookie) is not
taken for a flood and turned away, its newest HELLOs wait (dropped, counted ``overloaded``; the client asks again).

Time is passed in as ``now_ns`` (any clock, the same for every call).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import os
import secrets
import struct
from collections import OrderedDict
from typing import Literal, TypeAlias

import attrs
import msgpack  # type: ignore[import-untyped]
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from endpoint.connection.session import SessionSync
from endpoint.errors import ConfigurationError, HandshakeError, RejectReason
from endpoint.handshake.noise import CipherState, HandshakeState, NoiseError, Pattern

__all__ = [
    "COOKIE_LENGTH",
    "KEY_LENGTH",
    "MAGIC",
    "MAX_PACKET_LENGTH",
    "MAX_TAG_LENGTH",
    "MAX_TEXT_LENGTH",
    "PROTOCOL_VERSION",
    "Accepted",
    "Bounce",
    "ClientHandshake",
    "Completed",
    "CookieReceived",
    "Done",
    "Grant",
    "HandshakeStats",
    "Hello",
    "Kind",
    "Rejected",
    "Reply",
    "SealingKeys",
    "ServerHandshake",
    "SessionClaim",
    "SessionGranted",
    "SessionOffer",
    "answer_key",
    "unsealed_reject",
]

PROTOCOL_VERSION = 3
"""3: HELLO carries the client's message schemas (see :mod:`endpoint.schema`), and messages are encoded by field
name. 2: Noise NX/NK with a cookie round. 1: one X25519 exchange. Any two refuse each other with VERSION_MISMATCH."""
MAGIC = 0xE9D0
MAX_PACKET_LENGTH = 4096
"""Longer packets are malformed; also caps what the encoders may produce."""
KEY_LENGTH = 32
MAX_TAG_LENGTH = 32
MAX_TEXT_LENGTH = 256
"""REJECT texts are cut to this many characters."""
MAX_ADDRESS_LENGTH = 64
MAX_DETAIL_ENTRIES = 8
"""A rejection's detail (which class and field, for SERIALIZATION_MISMATCH) has at most this many entries."""
COOKIE_LENGTH = 24
_COOKIE_MAC_LENGTH = 16
_SESSION_PROOF_LENGTH = 16
_KEY_HINT_LENGTH = 8
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_U32_MAX = (1 << 32) - 1
_AAD = struct.Struct("<HBQ")

Reply: TypeAlias = dict[str, int | str]
"""How the server reaches the client (e.g. reply port); opaque to this module but bound into the transcript."""
Grant: TypeAlias = dict[str, int | str | bytes | bool]
"""What the server hands the client (ids, timeouts, ...); opaque except for the int ``connection_id``."""


class Kind(enum.IntEnum):
    HELLO = 1
    HELLO_ACK = 2
    """Inside an ANSWER's sealed payload: the grant."""
    REJECT = 3
    """Unsealed on the wire (version 1 layout, so old clients read it); inside an ANSWER: sealed."""
    DONE = 4
    DONE_ACK = 5
    ANSWER = 6
    COOKIE = 7
    SEALED_REJECT = 8
    """Sealed with the server->client key: a handshake past its ANSWER evicted for load."""


_ANSWER_KINDS = frozenset((Kind.REJECT, Kind.DONE_ACK, Kind.ANSWER, Kind.COOKIE, Kind.SEALED_REJECT))
_PATTERNS: tuple[Pattern, Pattern] = ("NX", "NK")


# ---------------------------------------------------------------------------------------------------------------------
# Results handed to the glue


@attrs.frozen
class Hello:
    """A client proved its route and sent a well-formed Noise message; the glue decides and calls accept/reject.

    ``protocol_version`` is always ours here (other versions are bounced by the state machine itself).
    """

    connect_key: int
    client_public: bytes
    """The client's ephemeral key (fresh per handshake)."""
    registration_hash: bytes
    reply: Reply
    tag: str
    source: str
    protocol_version: int
    pattern: Pattern = "NX"
    sealed: bool = False
    """The client asks for a sealed connection (bound into the transcript: nobody on the path can strip it)."""
    schema: bytes | None = None
    """The client's message schemas, packed (:func:`endpoint.schema.pack`); None when they did not fit."""


@attrs.frozen
class Bounce:
    """Send ``packet`` to ``reply`` at ``source`` and keep nothing: a cookie, or an unsealed refusal (another
    protocol version, a pinned key that is not ours)."""

    connect_key: int
    reply: Reply
    packet: bytes


@attrs.frozen
class SealingKeys:
    """The two keys of a sealed connection (see :mod:`endpoint.connection.sealing`), one per direction.

    Derived from the finished Noise handshake with labels of their own, never ``split``'s keys (those sealed
    DONE and DONE_ACK): fresh per handshake (the ``ee`` exchange), known only to the two ends.
    """

    client_to_server: bytes = attrs.field(repr=False)
    server_to_client: bytes = attrs.field(repr=False)


def _sealing_keys(noise: HandshakeState) -> SealingKeys:
    return SealingKeys(
        client_to_server=noise.export_key(b"sealing client->server"),
        server_to_client=noise.export_key(b"sealing server->client"),
    )


@attrs.frozen
class SessionOffer:
    """What a client claiming a buffered session puts in DONE: its long-lived key and its sync."""

    private_key: X25519PrivateKey = attrs.field(repr=False)
    sync: SessionSync


@attrs.frozen
class SessionClaim:
    """A client proved it holds the private key of ``public_key`` (its session) and said ``sync``."""

    public_key: bytes
    sync: SessionSync


@attrs.frozen
class SessionGranted:
    """The server's answer to a session claim: the session's id (stable while the server keeps it), whether the
    connection resumed a session it kept, and the server's sync."""

    session_id: int
    resumed: bool
    sync: SessionSync


def _session_proof(private_key: X25519PrivateKey, peer_public: bytes, noise: HandshakeState) -> bytes:
    """MAC under the X25519 secret of a client's session key and the server's static key, over a key exported
    from this handshake: only the holder of either private key makes it, and only for this handshake."""
    shared = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public))
    binding = noise.export_key(b"session proof")
    return hmac.new(shared, b"endpoint-session" + binding, hashlib.sha256).digest()[:_SESSION_PROOF_LENGTH]


@attrs.frozen
class Done:
    """The client proved it holds the key and has set up its side; the glue starts the connection and calls complete.

    ``keys``: the connection's sealing keys (used when the connection is sealed); ``session``: the buffered session
    the client proved it holds (None: it claimed none)."""

    connect_key: int
    connection_id: int
    keys: SealingKeys | None = attrs.field(default=None, eq=False)
    session: SessionClaim | None = None


@attrs.frozen
class Accepted:
    server_public: bytes
    grant: Grant


@attrs.frozen
class Rejected:
    """``authenticated`` is False for an unsealed REJECT: anyone on the path could have sent it (a hint only)."""

    reason: RejectReason
    text: str
    authenticated: bool
    detail: dict[str, int | str] | None = None
    """What exactly was refused, when the server said (SERIALIZATION_MISMATCH: ``type_id``, ``class``, ``field``)."""


@attrs.frozen
class CookieReceived:
    """The server asked for its cookie: send HELLO again at once (``ClientHandshake.hello`` now carries it)."""


@attrs.frozen
class Completed:
    """``keys``: the connection's sealing keys (used when the grant says the connection is sealed); always set by
    the state machine (None only in hand-made values)."""

    connection_id: int
    keys: SealingKeys | None = attrs.field(default=None, eq=False)
    session: SessionGranted | None = None
    """The server's answer to the session claimed in DONE (None: none claimed, or the server held none for us)."""


@attrs.define
class HandshakeStats:
    """``received`` counts every packet handed in; ``challenged`` cookies sent, ``evicted`` half-open handshakes
    that gave way to newer ones; the others count drops by cause."""

    received: int = 0
    malformed: int = 0
    replayed: int = 0
    spoofed: int = 0
    unknown: int = 0
    expired: int = 0
    overloaded: int = 0
    challenged: int = 0
    bad_cookie: int = 0
    misrouted: int = 0
    evicted: int = 0
    unsealed: int = 0
    unanswered: int = 0
    """Answers the glue could not send (no answer route free for the address); the client asks again."""
    busy: int = 0
    """HELLOs refused SERVER_BUSY with a retry-after before anything was made for them (more in flight than the
    server finishes within a handshake timeout, or their answer route already back-pressured)."""
    discarded: int = 0
    """Handshakes whose connection streams were made and then thrown away (never became a connection)."""


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
    pattern: Pattern = "NX"
    noise: bytes = b""
    cookie: bytes | None = None
    claimed_address: str = ""
    key_hint: bytes | None = None
    sealed: bool = False
    schema: bytes | None = None


@attrs.frozen
class _RejectMsg:
    connect_key: int
    reason: RejectReason
    text: str


@attrs.frozen
class _BlobMsg:
    """ANSWER, COOKIE, DONE, DONE_ACK, SEALED_REJECT: a connect key and one opaque byte string."""

    kind: Kind
    connect_key: int
    blob: bytes


_Message: TypeAlias = _HelloMsg | _RejectMsg | _BlobMsg


def _pack(value: object) -> bytes:
    data = msgpack.packb(value, use_bin_type=True)
    assert isinstance(data, bytes)
    return data


def _unpack(data: bytes) -> object:
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises a zoo of types on garbage (deep nesting included); all mean "malformed"
        raise HandshakeError(f"undecodable packet: {exc.__class__.__name__}") from exc


def answer_key(data: bytes | memoryview) -> int | None:
    """The connect key a server's answer names, None if it is no answer: lets one reader hand the answers on a
    shared stream to the handshakes they concern (each then opens only its own). Never raises."""
    if len(data) > MAX_PACKET_LENGTH:
        return None
    try:
        fields = _unpack(bytes(data))
    except HandshakeError:
        return None
    except Exception:  # pragma: no cover - belt and braces: a reader thread must never die on input
        return None
    if (
        type(fields) is list
        and len(fields) > 2
        and type(fields[0]) is int
        and fields[0] == MAGIC
        and type(fields[1]) is int
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


def _blob(value: object, what: str) -> bytes:
    if type(value) is not bytes or len(value) > MAX_PACKET_LENGTH:
        raise HandshakeError(f"{what} must be bytes")
    return value


def _str(value: object, max_length: int, what: str) -> str:
    if type(value) is not str or len(value) > max_length:
        raise HandshakeError(f"{what} must be a str of at most {max_length} characters")
    return value


def _reason(value: object) -> RejectReason:
    try:
        return RejectReason(_int(value, 0, _U32_MAX, "reject reason"))
    except ValueError as exc:
        raise HandshakeError(f"unknown reject reason {value!r:.20}") from exc


def _reply(value: object) -> Reply:
    if type(value) is not dict or len(value) > 16:
        raise HandshakeError("reply must be a map of at most 16 entries")
    for key, item in value.items():
        if type(key) is not str or type(item) not in (int, str):
            raise HandshakeError("reply must map str to int or str")
    return value


def _grant(value: object) -> Grant:
    if type(value) is not dict or len(value) > 64:
        raise HandshakeError("grant must be a map of at most 64 entries")
    for key, item in value.items():
        if type(key) is not str or type(item) not in (int, str, bytes, bool):
            raise HandshakeError("grant must map str to int, str, bytes or bool")
    if type(value.get("connection_id")) is not int:
        raise HandshakeError("grant must hold an int connection_id")
    return value


def _connect_key(value: object) -> int:
    return _int(value, 1, _U64_MAX, "connect key")


def _optional_bytes(value: object, length: int, what: str) -> bytes | None:
    return None if value is None else _bytes(value, length, what)


def _detail(value: object) -> dict[str, int | str]:
    if type(value) is not dict or len(value) > MAX_DETAIL_ENTRIES:
        raise HandshakeError(f"rejection detail must be a map of at most {MAX_DETAIL_ENTRIES} entries")
    for key, item in value.items():
        if type(key) is not str or not (type(item) is int or (type(item) is str and len(item) <= MAX_TEXT_LENGTH)):
            raise HandshakeError("rejection detail must map str to int or short str")
    return value


def _decode(data: bytes | memoryview) -> _Message:
    if len(data) > MAX_PACKET_LENGTH:
        raise HandshakeError(f"packet longer than {MAX_PACKET_LENGTH} bytes")
    fields = _unpack(bytes(data))
    if type(fields) is not list or len(fields) < 3 or type(fields[0]) is not int or fields[0] != MAGIC:
        raise HandshakeError("not a handshake packet")
    kind = fields[1]
    n = len(fields)
    if type(kind) is not int:
        raise HandshakeError("kind must be an int")
    if kind == Kind.HELLO:
        # Version 1's layout is the common prefix: a version-1 HELLO still decodes far enough to be refused.
        version = _int(fields[2], 0, _U32_MAX, "protocol version")
        if n < 9:
            raise HandshakeError("HELLO has too few fields")
        common = {
            "protocol_version": version,
            "connect_key": _connect_key(fields[3]),
            "client_public": _bytes(fields[4], KEY_LENGTH, "client public key"),
            "registration_hash": _bytes(fields[5], 32, "registration hash"),
            "reply": _reply(fields[6]),
            "tag": _str(fields[7], MAX_TAG_LENGTH, "tag"),
        }
        _int(fields[8], 0, (1 << 63) - 1, "timestamp")
        if version != PROTOCOL_VERSION:
            return _HelloMsg(**common)  # type: ignore[arg-type]
        if n != 16:
            raise HandshakeError("HELLO has the wrong number of fields")
        if type(fields[14]) is not bool:
            raise HandshakeError("HELLO's sealed flag must be a bool")
        pattern = _int(fields[9], 0, len(_PATTERNS) - 1, "pattern")
        noise = _blob(fields[10], "noise message")
        if noise[:KEY_LENGTH] != common["client_public"]:
            raise HandshakeError("the Noise message does not start with the client's ephemeral key")
        return _HelloMsg(
            **common,  # type: ignore[arg-type]
            pattern=_PATTERNS[pattern],
            noise=noise,
            cookie=_optional_bytes(fields[11], COOKIE_LENGTH, "cookie"),
            claimed_address=_str(fields[12], MAX_ADDRESS_LENGTH, "claimed address"),
            key_hint=_optional_bytes(fields[13], _KEY_HINT_LENGTH, "key hint"),
            sealed=fields[14],
            schema=None if fields[15] is None else _blob(fields[15], "schema"),
        )
    if kind == Kind.REJECT and n == 8:
        # fields 3..5 held version 1's seal; version 2 never seals this kind, so they are not read.
        return _RejectMsg(
            connect_key=_connect_key(fields[2]),
            reason=_reason(fields[6]),
            text=_str(fields[7], MAX_TEXT_LENGTH, "reject text"),
        )
    if kind in (Kind.ANSWER, Kind.COOKIE, Kind.DONE, Kind.DONE_ACK, Kind.SEALED_REJECT) and n == 4:
        return _BlobMsg(kind=Kind(kind), connect_key=_connect_key(fields[2]), blob=_blob(fields[3], "payload"))
    raise HandshakeError(f"unknown handshake kind or wrong field count: kind {kind!r:.20}, {n} fields")


def _aad(kind: Kind, connect_key: int) -> bytes:
    return _AAD.pack(MAGIC, kind, connect_key)


def _prologue(
    version: int,
    connect_key: int,
    registration_hash: bytes,
    reply: Reply,
    tag: str,
    claimed_address: str,
    sealed: bool,
    schema: bytes | None,
) -> bytes:
    """Everything the client says in HELLO besides the Noise message (its wish to seal and its schemas too), so an
    on-path change of any of it shows."""
    return _pack(
        [
            "endpoint-handshake",
            MAGIC,
            version,
            connect_key,
            registration_hash,
            reply,
            tag,
            claimed_address,
            sealed,
            schema,
        ]
    )


def _key_hint(public_key: bytes) -> bytes:
    return hashlib.sha256(b"endpoint-key-hint" + public_key).digest()[:_KEY_HINT_LENGTH]


def _checked_length(data: bytes, what: str) -> bytes:
    if len(data) > MAX_PACKET_LENGTH:
        raise ValueError(f"{what} would be {len(data)} bytes, over the {MAX_PACKET_LENGTH}-byte packet limit")
    return data


def _id_and_extra(payload: object) -> tuple[int, object]:
    """[connection_id] or [connection_id, session element] (None when absent)."""
    if type(payload) is not list or len(payload) not in (1, 2):
        raise HandshakeError("sealed payload must be [connection_id] or [connection_id, session]")
    connection_id = _int(payload[0], _I64_MIN, _U64_MAX, "connection id")
    return connection_id, payload[1] if len(payload) == 2 else None


def _sync(value: object) -> SessionSync:
    sync = SessionSync.from_list(value)
    if sync is None:
        raise HandshakeError("malformed session sync")
    return sync


def _seal(cipher: CipherState, kind: Kind, connect_key: int, payload: object) -> bytes:
    return _pack([MAGIC, kind, connect_key, cipher.encrypt_with_ad(_aad(kind, connect_key), _pack(payload))])


def _open(cipher: CipherState, kind: Kind, connect_key: int, sealed: bytes) -> object | None:
    """None when the tag does not verify (forged, tampered or another key); HandshakeError when it does but is junk."""
    try:
        plain = cipher.decrypt_with_ad(_aad(kind, connect_key), sealed)
    except NoiseError:
        return None
    return _unpack(plain)


def unsealed_reject(connect_key: int, reason: RejectReason, text: str) -> bytes:
    """A REJECT for when no key exists; the client takes it as an unauthenticated hint, since anyone could send it.
    Laid out as version 1's, so clients of either version read it."""
    return _pack(
        [
            MAGIC,
            Kind.REJECT,
            _connect_key(connect_key),
            None,
            None,
            None,
            int(RejectReason(reason)),
            text[:MAX_TEXT_LENGTH],
        ]
    )


def _observed_address(raw: bytes) -> str | None:
    """The address a COOKIE says the server saw us send from, if it is one."""
    if len(raw) > MAX_ADDRESS_LENGTH:
        return None
    try:
        return str(ipaddress.ip_address(raw.decode("ascii")))
    except (UnicodeDecodeError, ValueError):
        return None


def _same_address(claimed: str, source: str) -> bool:
    if claimed == source:  # the usual case, without parsing either
        return True
    try:
        return ipaddress.ip_address(claimed) == ipaddress.ip_address(source)
    except ValueError:
        return claimed == source


# ---------------------------------------------------------------------------------------------------------------------
# Server


_ServerState: TypeAlias = Literal["hello", "acked", "done"]


@attrs.define
class _Pending:
    client_public: bytes
    source: str
    noise: HandshakeState
    updated_ns: int
    state: _ServerState = "hello"
    connection_id: int | None = None
    reply: bytes | None = None
    send: CipherState | None = None
    receive: CipherState | None = None
    done_packet: bytes | None = None
    keys: SealingKeys | None = None
    claimed: bool = False
    """DONE claimed a buffered session (DONE_ACK must answer it)."""


@attrs.define
class _Finished:
    """A handshake answered for good (REJECT or DONE_ACK), kept briefly so a client whose answer was lost can retry."""

    client_public: bytes
    connection_id: int | None
    reply: bytes
    done_packet: bytes | None
    updated_ns: int


class ServerHandshake:
    """Server side of every handshake in flight on one end point.

    ``cookie_period_ns``: the cookie secret rotates this often; a cookie is good for one to two periods.
    """

    def __init__(
        self,
        private_key: X25519PrivateKey,
        *,
        protocol_version: int = PROTOCOL_VERSION,
        handshake_timeout_ns: int,
        max_pending: int,
        max_pending_per_source: int,
        cookie_period_ns: int = 30_000_000_000,
        max_seen: int = 65536,
    ) -> None:
        for name, value in (
            ("handshake_timeout_ns", handshake_timeout_ns),
            ("cookie_period_ns", cookie_period_ns),
            ("max_pending", max_pending),
            ("max_pending_per_source", max_pending_per_source),
            ("max_seen", max_seen),
        ):
            if value <= 0:
                raise ConfigurationError(f"{name} must be > 0, got {value}")
        self._private_key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes_raw()
        self._key_hint = _key_hint(self.public_key)
        self.protocol_version = protocol_version
        self.handshake_timeout_ns = handshake_timeout_ns
        self.cookie_period_ns = cookie_period_ns
        self.max_pending = max_pending
        self.max_pending_per_source = max_pending_per_source
        self.max_seen = max_seen
        self.stats = HandshakeStats()
        self.retried: int | None = None
        """Connect key of the retry (duplicate HELLO or DONE) the last ``receive`` saw; resend ``last_reply`` to it."""
        self.evicted: list[tuple[int, bytes]] = []
        """(connect key, SERVER_BUSY answer) of handshakes that gave way to newer ones; the glue sends each answer,
        frees what it set up, and clears the list."""
        self._pending: OrderedDict[int, _Pending] = OrderedDict()  # oldest first
        self._per_source: dict[str, int] = {}
        self._finished: OrderedDict[int, _Finished] = OrderedDict()
        self._seen: OrderedDict[int, int] = OrderedDict()  # connect key -> first seen ns, oldest first
        self._secrets: dict[int, bytes] = {}  # cookie epoch -> secret; the current and the previous one

    # -- network side ---------------------------------------------------------------------------------------------

    def receive(
        self, data: bytes | memoryview, source: str, now_ns: int, *, routable: bool = False
    ) -> Hello | Done | Bounce | None:
        """Feed one packet from ``source``; a result means the glue has to act, None means dropped or retried.

        ``routable``: the transport itself proves the answer reaches the sender (IPC on a shared driver), so no
        cookie round is asked for and no claimed address checked.
        """
        self.stats.received += 1
        self.retried = None
        try:
            message = _decode(data)
            if isinstance(message, _HelloMsg):
                return self._on_hello(message, source, now_ns, routable)
            if isinstance(message, _BlobMsg) and message.kind == Kind.DONE:
                return self._on_done(message, now_ns)
            raise HandshakeError("a client sent a server-only message kind")
        except HandshakeError:
            self.stats.malformed += 1
        except Exception:  # whatever a packet does, the server goes on; counted as malformed
            self.stats.malformed += 1
        return None

    def _cookie(self, message: _HelloMsg, source: str, epoch: int) -> bytes | None:
        secret = self._secrets.get(epoch)
        if secret is None:
            return None
        material = _pack([source, message.reply, message.client_public, message.connect_key, epoch])
        mac = hmac.new(secret, material, hashlib.sha256).digest()[:_COOKIE_MAC_LENGTH]
        return epoch.to_bytes(8, "little") + mac

    def _current_epoch(self, now_ns: int) -> int:
        epoch = now_ns // self.cookie_period_ns
        if epoch not in self._secrets:
            self._secrets[epoch] = os.urandom(32)
            for old in [e for e in self._secrets if e < epoch - 1]:
                del self._secrets[old]
        return epoch

    def _cookie_ok(self, message: _HelloMsg, source: str, now_ns: int) -> bool:
        cookie = message.cookie
        if cookie is None:
            return False
        epoch = int.from_bytes(cookie[:8], "little")
        current = self._current_epoch(now_ns)
        if epoch not in (current, current - 1):
            return False
        expected = self._cookie(message, source, epoch)
        return expected is not None and hmac.compare_digest(expected, cookie)

    def _on_hello(self, message: _HelloMsg, source: str, now_ns: int, routable: bool) -> Hello | Bounce | None:
        key = message.connect_key
        if message.protocol_version != self.protocol_version:
            return Bounce(
                key,
                message.reply,
                unsealed_reject(
                    key,
                    RejectReason.VERSION_MISMATCH,
                    f"client speaks handshake version {message.protocol_version}, server {self.protocol_version}",
                ),
            )
        known = self._pending.get(key) or self._finished.get(key)
        if known is not None:
            if hmac.compare_digest(known.client_public, message.client_public):
                self.retried = key
                if isinstance(known, _Pending) and known.state == "acked":
                    # Its answer is on the way (or was lost): the resend reuses what was made for it, so it must
                    # not expire under a client still asking (the caps and eviction still bound it).
                    self.keep(key, now_ns)
            else:
                self.stats.replayed += 1
            return None
        if message.pattern == "NK" and message.key_hint != self._key_hint:
            # The client pinned another key: it cannot read anything we seal, so say it plainly (a hint it checks).
            return Bounce(
                key, message.reply, unsealed_reject(key, RejectReason.SERVER_KEY_CHANGED, "the server's key changed")
            )
        if not routable:
            if not self._cookie_ok(message, source, now_ns):
                if message.cookie is not None:
                    self.stats.bad_cookie += 1
                self.stats.challenged += 1
                cookie = self._cookie(message, source, self._current_epoch(now_ns))
                assert cookie is not None
                # The source as seen here goes along: a client behind a NAT learns the address to claim from it.
                return Bounce(key, message.reply, _pack([MAGIC, Kind.COOKIE, key, cookie + source.encode()]))
            if not _same_address(message.claimed_address, source):
                self.stats.misrouted += 1
                return None
        self._prune_seen(now_ns)
        if key in self._seen:
            self.stats.replayed += 1
            return None
        noise = HandshakeState(
            message.pattern,
            initiator=False,
            prologue=_prologue(
                message.protocol_version,
                key,
                message.registration_hash,
                message.reply,
                message.tag,
                message.claimed_address,
                message.sealed,
                message.schema,
            ),
            static=self._private_key,
        )
        try:
            payload = noise.read_message(message.noise)
        except NoiseError:
            self.stats.spoofed += 1
            return None
        if payload:
            raise HandshakeError("HELLO's Noise payload must be empty")
        if not self._make_room(source, now_ns):
            self.stats.overloaded += 1
            return None
        self._pending[key] = _Pending(message.client_public, source, noise, now_ns)
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
            pattern=message.pattern,
            sealed=message.sealed,
            schema=message.schema,
        )

    def _make_room(self, source: str, now_ns: int) -> bool:
        """Evict a half-open handshake so a new one fits: this source's oldest when it is at its cap, else the
        oldest of the source holding the most (a flood from a few sources evicts itself, not a lone client).
        False when nothing can give way (every candidate has its DONE and is being set up), or when the candidate
        is the newcomer's own source's and was active within half the handshake timeout: then it is a burst
        still under way (many clients behind one address), and evicting its progress for a newer one of the same
        source would only make both start over; the newcomer asks again (a flood from that address hurts only
        itself, as before, and a stalled handshake still gives way once it has idled that long)."""
        if self._per_source.get(source, 0) >= self.max_pending_per_source:
            candidates = [k for k, e in self._pending.items() if e.source == source and e.state != "done"]
        elif len(self._pending) >= self.max_pending:
            evictable: dict[str, list[int]] = {}
            for key, entry in self._pending.items():  # oldest first
                if entry.state != "done":
                    evictable.setdefault(entry.source, []).append(key)
            # Most pending first; among equals, the source whose oldest is oldest (dicts keep first-seen order).
            candidates = max(evictable.values(), key=len) if evictable else []
        else:
            return True
        if not candidates:
            return False
        oldest = self._pending[candidates[0]]
        if oldest.source == source and now_ns - oldest.updated_ns < self.handshake_timeout_ns // 2:
            return False
        self._evict(candidates[0])
        return True

    def _evict(self, connect_key: int) -> None:
        entry = self._pending[connect_key]
        text = "the server is busy with other handshakes; try again"
        if entry.state == "hello":
            packet = self._answer(connect_key, entry, [int(Kind.REJECT), int(RejectReason.SERVER_BUSY), text])
        else:
            assert entry.send is not None
            packet = _seal(entry.send, Kind.SEALED_REJECT, connect_key, [int(RejectReason.SERVER_BUSY), text])
        self._remove(connect_key)
        self._remember_finished(connect_key, entry, None, packet)
        self.evicted.append((connect_key, packet))
        self.stats.evicted += 1

    def _on_done(self, message: _BlobMsg, now_ns: int) -> Done | None:
        key = message.connect_key
        entry = self._pending.get(key)
        finished = self._finished.get(key) if entry is None else None
        if entry is not None and entry.state == "done":
            # A resent DONE while the glue sets the connection up: it answers once that is done.
            if entry.done_packet is None or not hmac.compare_digest(entry.done_packet, message.blob):
                self.stats.spoofed += 1
            return None
        if finished is not None:
            if finished.done_packet is None:
                self.stats.unknown += 1  # rejected or evicted: its answer went out with the rejection
            elif hmac.compare_digest(finished.done_packet, message.blob):
                self.retried = key  # DONE_ACK was lost: send it again
            else:
                self.stats.spoofed += 1
            return None
        if entry is None or entry.state != "acked" or entry.receive is None:
            self.stats.unknown += 1
            return None
        payload = _open(entry.receive, Kind.DONE, key, message.blob)
        if payload is None:
            self.stats.spoofed += 1
            return None
        connection_id, extra = _id_and_extra(payload)
        if connection_id != entry.connection_id:
            raise HandshakeError("DONE names another connection id than the one granted")
        claim = None
        if extra is not None:
            claim = self._session_claim(extra, entry)
            if claim is None:
                self.stats.spoofed += 1
                return None
        assert entry.connection_id is not None
        assert entry.keys is not None
        entry.state = "done"
        entry.done_packet = message.blob
        entry.updated_ns = now_ns
        entry.claimed = claim is not None
        return Done(connect_key=key, connection_id=entry.connection_id, keys=entry.keys, session=claim)

    def _session_claim(self, extra: object, entry: _Pending) -> SessionClaim | None:
        """The session DONE claims, or None when its proof does not hold (HandshakeError when malformed)."""
        if type(extra) is not list or len(extra) != 3:
            raise HandshakeError("a session claim must be [public key, proof, sync]")
        public = _bytes(extra[0], KEY_LENGTH, "session key")
        proof = _bytes(extra[1], _SESSION_PROOF_LENGTH, "session proof")
        sync = _sync(extra[2])
        try:
            expected = _session_proof(self._private_key, public, entry.noise)
        except ValueError:  # a low-order point: no secret, no session
            return None
        if not hmac.compare_digest(expected, proof):
            return None
        return SessionClaim(public, sync)

    def _prune_seen(self, now_ns: int) -> None:
        # A connect key is remembered while a cookie naming it could still be good (two periods).
        horizon = now_ns - 2 * self.cookie_period_ns - self.handshake_timeout_ns
        while self._seen:
            oldest_key = next(iter(self._seen))
            if self._seen[oldest_key] >= horizon:
                break
            del self._seen[oldest_key]

    # -- glue side ------------------------------------------------------------------------------------------------

    def _answer(self, connect_key: int, entry: _Pending, payload: list[object]) -> bytes:
        message = entry.noise.write_message(_pack(payload))
        entry.send, entry.receive = entry.noise.split()
        entry.keys = _sealing_keys(entry.noise)
        return _checked_length(_pack([MAGIC, Kind.ANSWER, connect_key, message]), "ANSWER")

    def accept(self, connect_key: int, grant: Grant, now_ns: int) -> bytes:
        """ANSWER sealing ``grant``; the entry's timeout restarts at ``now_ns``.

        Raises KeyError when the handshake is not pending (expired, evicted, abandoned), RuntimeError when it was
        already answered, ValueError for a grant that is not a valid grant or does not fit in one packet.
        """
        entry = self._pending[connect_key]
        if entry.state != "hello":
            raise RuntimeError(f"handshake {connect_key:#x} was already accepted")
        try:
            connection_id = _grant(grant)["connection_id"]
        except HandshakeError as exc:
            raise ValueError(str(exc)) from exc
        assert type(connection_id) is int
        if len(_pack(grant)) > MAX_PACKET_LENGTH - 128:
            raise ValueError("the grant does not fit in one packet")
        packet = self._answer(connect_key, entry, [int(Kind.HELLO_ACK), grant])
        entry.state = "acked"
        entry.connection_id = connection_id
        entry.reply = packet
        entry.updated_ns = now_ns
        return packet

    def reject(
        self, connect_key: int, reason: RejectReason, text: str, detail: dict[str, int | str] | None = None
    ) -> bytes:
        """Sealed rejection (``text`` cut to MAX_TEXT_LENGTH, ``detail`` saying what exactly was refused); ends the
        handshake. KeyError when it is not pending, RuntimeError when it was already accepted, HandshakeError for
        a detail that is not one."""
        entry = self._pending[connect_key]
        if entry.state != "hello":
            raise RuntimeError(f"handshake {connect_key:#x} was already accepted")
        payload: list[object] = [int(Kind.REJECT), int(RejectReason(reason)), text[:MAX_TEXT_LENGTH]]
        if detail is not None:
            payload.append(_detail(detail))
        packet = self._answer(connect_key, entry, payload)
        self._remove(connect_key)
        self._remember_finished(connect_key, entry, None, packet)
        return packet

    def complete(self, connect_key: int, session: SessionGranted | None = None) -> bytes:
        """DONE_ACK, answering the session DONE claimed with ``session`` (None: the server holds none for the
        client); ends the handshake. KeyError when it is not pending, RuntimeError before DONE arrived."""
        entry = self._pending[connect_key]
        if entry.state != "done" or entry.connection_id is None or entry.send is None:
            raise RuntimeError(f"handshake {connect_key:#x} has not received DONE")
        payload: list[object] = [entry.connection_id]
        if entry.claimed:  # only then: a client that knows no sessions reads exactly [connection_id]
            payload.append(None if session is None else [session.session_id, session.resumed, session.sync.as_list()])
        packet = _seal(entry.send, Kind.DONE_ACK, connect_key, payload)
        self._remove(connect_key)
        self._remember_finished(connect_key, entry, entry.connection_id, packet)
        return packet

    def abandon(self, connect_key: int) -> None:
        """Forget a pending handshake without answering (the glue could not set it up); unknown keys are ignored.

        Its connect key may come again: the client, never answered, retries with the same HELLO.
        """
        if connect_key in self._pending:
            self._remove(connect_key)
            self._seen.pop(connect_key, None)

    def expire(self, now_ns: int) -> list[int]:
        """Drop handshakes idle for longer than the timeout; the glue frees whatever it set up for the returned keys."""
        deadline = now_ns - self.handshake_timeout_ns
        expired = [key for key, entry in self._pending.items() if entry.updated_ns < deadline]
        for key in expired:
            self._remove(key)
        self.stats.expired += len(expired)
        # Finished ones go oldest first, and only those (this runs every tick; a storm leaves a thousand): in the
        # order they finished, each at most a handshake timeout later than its last step says.
        finished = self._finished
        while finished and next(iter(finished.values())).updated_ns < deadline:
            finished.popitem(last=False)
        self._prune_seen(now_ns)
        return expired

    def last_reply(self, connect_key: int) -> bytes | None:
        """The answer last sent for ``connect_key`` (to resend on a retry), or None when there is none to resend."""
        entry = self._pending.get(connect_key)
        if entry is not None:
            return entry.reply
        finished = self._finished.get(connect_key)
        return finished.reply if finished is not None else None

    def keep(self, connect_key: int, now_ns: int) -> None:
        """An answered handshake whose answer has not left yet (its route back-pressured): its timeout restarts,
        so the client's resent HELLO finds it and gets the same answer; unknown keys are ignored."""
        entry = self._pending.get(connect_key)
        if entry is not None:
            entry.updated_ns = max(entry.updated_ns, now_ns)

    def pending_count(self) -> int:
        return len(self._pending)

    def is_pending(self, connect_key: int) -> bool:
        return connect_key in self._pending

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
            entry.client_public, connection_id, packet, entry.done_packet, entry.updated_ns
        )
        while len(self._finished) > self.max_pending:
            self._finished.popitem(last=False)


# ---------------------------------------------------------------------------------------------------------------------
# Client


_ClientState: TypeAlias = Literal["new", "hello_sent", "accepted", "done_sent", "completed", "rejected"]


class ClientHandshake:
    """Client side of one handshake (one connect key); a new connect attempt after a failure uses a new instance.

    ``expected_server_key`` (the pin) makes it NK, else NX; ``force_nx`` keeps NX and checks the pin only after
    the server proved its key (to tell a changed key from an attacker). ``claimed_address``: the address this
    client sends from, as the server will see it (bound into the transcript; empty over IPC).
    """

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
        claimed_address: str = "",
        force_nx: bool = False,
        sealed: bool = False,
        schema: bytes | None = None,
    ) -> None:
        if type(registration_hash) is not bytes or len(registration_hash) != 32:
            raise ConfigurationError("registration_hash must be 32 bytes")
        if type(tag) is not str or len(tag) > MAX_TAG_LENGTH:
            raise ConfigurationError(f"tag must be a str of at most {MAX_TAG_LENGTH} characters, got {tag!r}")
        if type(claimed_address) is not str or len(claimed_address) > MAX_ADDRESS_LENGTH:
            raise ConfigurationError(f"claimed_address must be a str of at most {MAX_ADDRESS_LENGTH} characters")
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
        self.connect_key: int = connect_key
        self.registration_hash = registration_hash
        self.reply = dict(reply)
        self.tag = tag
        self.protocol_version = protocol_version
        self.claimed_address = claimed_address
        self.sealed = bool(sealed)
        """Ask the server for a sealed connection (the grant's ``sealed`` says what it decided)."""
        if schema is not None and type(schema) is not bytes:
            raise ConfigurationError("schema must be bytes or None")
        self.schema = schema
        """Our message schemas, packed, for a server whose registration hash differs to check (None: not sent)."""
        self.expected_server_key = expected_server_key
        self.pattern: Pattern = "NK" if expected_server_key is not None and not force_nx else "NX"
        self.stats = HandshakeStats()
        self.server_public: bytes | None = None
        self.grant: Grant | None = None
        self.cookie: bytes | None = None
        self.hint: Rejected | None = None
        """The last unsealed REJECT ignored (the server cannot have said it, or we could not check): for the
        caller's error message when the connect times out."""
        self._ephemeral = private_key if private_key is not None else X25519PrivateKey.generate()
        self._noise, self._first = self._initiator()
        self.public_key: bytes = self._first[:KEY_LENGTH]
        self._send: CipherState | None = None
        self._receive: CipherState | None = None
        self._keys: SealingKeys | None = None
        self._done: bytes | None = None
        self._claimed = False
        self._state: _ClientState = "new"
        self._cookie_resends = 0
        self.hello_length = len(self._hello_packet((1 << 63) - 1))
        """The longest HELLO this handshake sends (a caller keeps it within one frame of its stream)."""
        if self.hello_length > MAX_PACKET_LENGTH:
            raise ConfigurationError(f"reply, tag and schema make HELLO longer than {MAX_PACKET_LENGTH} bytes")

    def _initiator(self) -> tuple[HandshakeState, bytes]:
        """The Noise initiator over what HELLO says now, and its first message (the same ephemeral key each time,
        so a cookie made for it stays good)."""
        noise = HandshakeState(
            self.pattern,
            initiator=True,
            prologue=_prologue(
                self.protocol_version,
                self.connect_key,
                self.registration_hash,
                self.reply,
                self.tag,
                self.claimed_address,
                self.sealed,
                self.schema,
            ),
            remote_static=self.expected_server_key if self.pattern == "NK" else None,
            ephemeral=self._ephemeral,
        )
        return noise, noise.write_message(b"")

    @property
    def state(self) -> _ClientState:
        return self._state

    @property
    def handshake_hash(self) -> bytes:
        return self._noise.handshake_hash

    @property
    def sealing_keys(self) -> SealingKeys | None:
        """The connection's sealing keys once the handshake completed (DONE_ACK opened), else None."""
        return self._keys if self._state == "completed" else None

    @property
    def connection_id(self) -> int | None:
        if self.grant is None:
            return None
        connection_id = self.grant["connection_id"]
        assert type(connection_id) is int
        return connection_id

    def hello(self, now_ns: int) -> bytes:
        """HELLO (carrying the cookie once the server sent one); call again to retry with the same connect key.

        ``now_ns`` (epoch) is stamped for servers of version 1, which check it; version 2 relies on its cookie.
        """
        if self._state not in ("new", "hello_sent"):
            raise RuntimeError(f"HELLO makes no sense in state {self._state!r}")
        self._state = "hello_sent"
        return self._hello_packet(max(0, now_ns // 1_000_000))

    def _hello_packet(self, timestamp_ms: int) -> bytes:
        hint = _key_hint(self.expected_server_key) if self.pattern == "NK" and self.expected_server_key else None
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
                _PATTERNS.index(self.pattern),
                self._first,
                self.cookie,
                self.claimed_address,
                hint,
                self.sealed,
                self.schema,
            ]
        )

    def done(self, session: SessionOffer | None = None) -> bytes:
        """DONE sealed with the client->server key, claiming ``session`` (only when the grant offered sessions: a
        server that knows none would drop it); the same bytes on every call, so it may be resent (the session
        of the first call is the one claimed)."""
        if self._state not in ("accepted", "done_sent") or self._send is None:
            raise RuntimeError(f"DONE makes no sense in state {self._state!r}")
        self._state = "done_sent"
        if self._done is None:
            payload: list[object] = [self.connection_id]
            if session is not None:
                assert self.server_public is not None
                public = session.private_key.public_key().public_bytes_raw()
                proof = _session_proof(session.private_key, self.server_public, self._noise)
                payload.append([public, proof, session.sync.as_list()])
                self._claimed = True
            self._done = _seal(self._send, Kind.DONE, self.connect_key, payload)
        return self._done

    def receive(self, data: bytes | memoryview) -> Accepted | Rejected | Completed | CookieReceived | None:
        """Feed one packet from the server; None means nothing to do (dropped, counted in ``stats``, or a duplicate).
        Never raises."""
        self.stats.received += 1
        try:
            message = _decode(data)
            if isinstance(message, _HelloMsg) or (isinstance(message, _BlobMsg) and message.kind == Kind.DONE):
                raise HandshakeError("the server sent a client-only message kind")
            if message.connect_key != self.connect_key:
                self.stats.unknown += 1
                return None
            if isinstance(message, _RejectMsg):
                return self._on_unsealed_reject(message)
            if message.kind == Kind.COOKIE:
                return self._on_cookie(message)
            if message.kind == Kind.ANSWER:
                return self._on_answer(message)
            if message.kind == Kind.SEALED_REJECT:
                return self._on_sealed_reject(message)
            return self._on_done_ack(message)
        except HandshakeError:
            self.stats.malformed += 1
        except Exception:  # whatever a packet does, the client goes on; counted as malformed
            self.stats.malformed += 1
        return None

    def _on_cookie(self, message: _BlobMsg) -> CookieReceived | None:
        blob = message.blob
        observed = _observed_address(blob[COOKIE_LENGTH:])
        if self._state != "hello_sent" or len(blob) < COOKIE_LENGTH or observed is None:
            self.stats.unknown += 1
            return None
        first = self.cookie is None
        self.cookie = blob[:COOKIE_LENGTH]
        if observed != self.claimed_address:
            # Behind a NAT the server sees another address than ours: claim that one (a lie here only makes the
            # server drop our HELLO as misrouted, which an on-path attacker could do anyway).
            self.claimed_address = observed
            self._noise, self._first = self._initiator()
        # Resend at once for the first cookies only: forged cookies must not make us flood the server.
        if first or self._cookie_resends < 2:
            self._cookie_resends += 1
            return CookieReceived()
        return None

    def _on_unsealed_reject(self, message: _RejectMsg) -> Rejected | None:
        rejected = Rejected(message.reason, message.text, authenticated=False)
        # Believed (as a hint) only while the server cannot hold a key for us: before any cookie.
        if self._state != "hello_sent" or self.cookie is not None:
            self.stats.unsealed += 1
            self.hint = rejected
            return None
        return rejected

    def _on_answer(self, message: _BlobMsg) -> Accepted | Rejected | None:
        if self._state in ("accepted", "done_sent"):
            return None  # the server resent its answer to a HELLO retry; DONE is (re)sent on the glue's timer
        if self._state != "hello_sent":
            self.stats.unknown += 1
            return None
        try:
            plain = self._noise.read_message(message.blob)
        except NoiseError:
            self.stats.spoofed += 1
            return None
        self._send, self._receive = self._noise.split()
        self._keys = _sealing_keys(self._noise)
        server_public = self._noise.remote_static
        assert server_public is not None
        self.server_public = server_public
        payload = _unpack(plain)
        if type(payload) is not list or not payload or type(payload[0]) is not int:
            raise HandshakeError("ANSWER payload must be [kind, ...]")
        if (
            self.pattern == "NX"
            and self.expected_server_key is not None
            and not hmac.compare_digest(self.expected_server_key, server_public)
        ):
            self._state = "rejected"
            return Rejected(
                RejectReason.SERVER_KEY_CHANGED,
                f"server public key {server_public.hex()} differs from the stored {self.expected_server_key.hex()}",
                authenticated=True,
            )
        if payload[0] == Kind.REJECT and len(payload) in (3, 4):
            self._state = "rejected"
            return Rejected(
                _reason(payload[1]),
                _str(payload[2], MAX_TEXT_LENGTH, "reject text"),
                authenticated=True,
                detail=_detail(payload[3]) if len(payload) == 4 else None,
            )
        if payload[0] == Kind.HELLO_ACK and len(payload) == 2:
            grant = _grant(payload[1])
            self.grant = grant
            self._state = "accepted"
            return Accepted(server_public=server_public, grant=grant)
        raise HandshakeError("ANSWER payload is neither a grant nor a rejection")

    def _on_sealed_reject(self, message: _BlobMsg) -> Rejected | None:
        if self._state not in ("accepted", "done_sent") or self._receive is None:
            self.stats.unknown += 1
            return None
        payload = _open(self._receive, Kind.SEALED_REJECT, self.connect_key, message.blob)
        if payload is None:
            self.stats.spoofed += 1
            return None
        if type(payload) is not list or len(payload) != 2:
            raise HandshakeError("sealed rejection must be [reason, text]")
        self._state = "rejected"
        return Rejected(_reason(payload[0]), _str(payload[1], MAX_TEXT_LENGTH, "reject text"), authenticated=True)

    def _on_done_ack(self, message: _BlobMsg) -> Completed | None:
        if self._state != "done_sent" or self._receive is None:
            self.stats.unknown += 1
            return None
        payload = _open(self._receive, Kind.DONE_ACK, self.connect_key, message.blob)
        if payload is None:
            self.stats.spoofed += 1
            return None
        connection_id, extra = _id_and_extra(payload)
        if connection_id != self.connection_id:
            raise HandshakeError("DONE_ACK names another connection id than the one granted")
        granted = None
        if extra is not None:
            if not self._claimed or type(extra) is not list or len(extra) != 3:
                raise HandshakeError("DONE_ACK answers a session claim that was not made, or is malformed")
            session_id = _int(extra[0], 1, _U64_MAX, "session id")
            if type(extra[1]) is not bool:
                raise HandshakeError("DONE_ACK's resumed flag must be a bool")
            granted = SessionGranted(session_id, extra[1], _sync(extra[2]))
        self._state = "completed"
        assert self._keys is not None
        return Completed(connection_id, self._keys, granted)
