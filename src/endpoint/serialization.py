"""Message codec of the end points: msgpack through msgspec, with attrs classes registered under small integer ids.

A registered attrs instance travels as a msgpack ext value (code :data:`ATTRS_EXT`) whose data is the type id
(a msgpack uint) followed by a msgpack map of field name to value; everything else is plain msgpack. Keying the
fields by name is what lets two versions of a class talk: a reader ignores names it does not know and fills the
ones that did not come from their defaults (see :mod:`endpoint.schema` for the rules the handshake checks).

Two kinds of registered class:

- *typed*: every field's annotation is a concrete type msgspec can check (``int``, ``str``, ``list[float]``,
  ``Vec2``, ``bytes | None``...). msgspec encodes the instance and decodes it, checking each field's type, in one
  C call each way; a nested attrs value in a typed field travels as a plain map (its class is in the annotation).
- *dynamic*: a field is ``Any`` (or unannotated, or of a type msgspec cannot check). Its fields are walked in
  Python so that registered objects anywhere inside them travel as ext values with their type id, and decoded
  back into their classes, as in plain (unregistered) messages.

The hot path is one small typed message: a dict lookup and one msgspec call to encode, a few byte reads of the
header and one msgspec call on a memoryview to decode.
"""

from __future__ import annotations

import hashlib
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

import attrs
import msgspec

from endpoint.errors import ConfigurationError, SerializationError
from endpoint.schema import ClassSchema, describe, pack, resolved_fields

if TYPE_CHECKING:
    from endpoint._codec import Codec

__all__ = [
    "ATTRS_EXT",
    "INTERNAL_TYPE_ID_MAX",
    "INTERNAL_TYPE_ID_MIN",
    "MAX_NESTING",
    "USER_TYPE_ID_MAX",
    "USER_TYPE_ID_MIN",
    "Serialization",
]

T = TypeVar("T")

ATTRS_EXT: Final = 1
"""msgpack ext code carrying a registered attrs instance."""
USER_TYPE_ID_MIN: Final = 1
USER_TYPE_ID_MAX: Final = 0x7EFF
INTERNAL_TYPE_ID_MIN: Final = 0x7F00
"""Ids from here up belong to the end point's own control messages."""
INTERNAL_TYPE_ID_MAX: Final = 0x7FFF
MAX_NESTING: Final = 32
"""Most registered objects nested inside one another (as ext values) in one message.

Each level is a nested C-level decode, so a few hundred levels of hostile input would go deep into the C stack;
the limit keeps decode far away from that. Encoding counts a registered top-level message as the first level;
decoding counts the ext values inside a message, so it reads one level more than encoding ever writes.
"""

_HASH_DOMAIN: Final = b"endpoint.serialization.v2"

_Codec: type[Codec] | None
try:
    from endpoint._codec import Codec as _Codec
except ImportError:  # not built: the Python codec does everything (slower, same bytes)
    _Codec = None
_SCALARS: Final = frozenset((int, float, str, bytes, bool, type(None)))
_Ext: Final = msgspec.msgpack.Ext


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _uint(value: int) -> bytes:
    """msgpack's shortest uint encoding of a type id."""
    if value < 0x80:
        return bytes((value,))
    if value <= 0xFF:
        return bytes((0xCC, value))
    return b"\xcd" + value.to_bytes(2, "big")


def _ext_header(length: int) -> bytes:
    """ext8/16/32 header of code ATTRS_EXT for ``length`` data bytes (never fixext: one shape per length band)."""
    if length <= 0xFF:
        return bytes((0xC7, length, ATTRS_EXT))
    if length <= 0xFFFF:
        return b"\xc8" + length.to_bytes(2, "big") + bytes((ATTRS_EXT,))
    if length <= 0xFFFFFFFF:
        return b"\xc9" + length.to_bytes(4, "big") + bytes((ATTRS_EXT,))
    raise SerializationError(f"registered object too large to encode: {length} bytes")


_EXT8: Final = tuple(_ext_header(n) for n in range(256))


class _ExtKey:
    """A registered object used as a map key, encoded: msgspec's Ext is unhashable, this stands in for it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __hash__(self) -> int:
        return hash(self.data)

    def __eq__(self, other: object) -> bool:
        return type(other) is _ExtKey and other.data == self.data


def _enc_hook(obj: object) -> object:
    if type(obj) is _ExtKey:
        return _Ext(ATTRS_EXT, obj.data)
    if isinstance(obj, int):  # ints beyond 64 bits
        raise SerializationError(f"cannot encode int {obj:.3g}: outside msgpack's 64-bit range")
    kind = "unregistered attrs class" if attrs.has(type(obj)) else "unsupported type"
    raise SerializationError(f"cannot encode {_type_name(type(obj))}: {kind}")


def _encode_error(name: str, exc: Exception) -> SerializationError:
    if isinstance(exc, OverflowError):
        return SerializationError(f"cannot encode {name}: an int outside msgpack's 64-bit range")
    return SerializationError(f"cannot encode {name}: {type(exc).__name__}: {exc}")


def _typed(tp: object, seen: frozenset[type] = frozenset()) -> bool:
    """True when msgspec can check ``tp`` all the way down (no Any, object or untyped part)."""
    if tp in seen:
        return True  # a class that contains itself: its fields are being checked already
    if tp is Any or tp is object or tp is None or isinstance(tp, (str, typing.TypeVar)):
        return tp is None
    origin = typing.get_origin(tp)
    if origin is not None:
        if origin is typing.Literal:
            return True
        return all(arg is Ellipsis or _typed(arg, seen) for arg in typing.get_args(tp))
    if isinstance(tp, type) and attrs.has(tp):
        return _typed_class(tp, seen | {tp})
    return True


def _typed_class(cls: type, seen: frozenset[type]) -> bool:
    # msgspec leaves fields named with a leading underscore out of what it writes: those go the dynamic way.
    return all(
        field.type is not None and not field.name.startswith("_") and _typed(field.type, seen)
        for field in resolved_fields(cls)
    )
    return True


class _Entry:
    """One registered class: how it is encoded and decoded."""

    __slots__ = ("cls", "decode", "encode_body", "heads", "init_names", "name", "tag", "type_id", "typed")

    def __init__(self, cls: type, type_id: int, name: str) -> None:
        self.cls = cls
        self.type_id = type_id
        self.name = name
        self.tag = _uint(type_id)
        self.heads: dict[int, bytes] = {}
        """Body length -> ext header and type id, made on first use (a class sees few lengths)."""
        self.typed = False
        self.encode_body: Callable[[object], bytes] = _unset
        self.decode: Callable[[Any], object] = _unset
        fields = resolved_fields(cls)
        self.init_names: dict[str, str] = {field.name: field.alias or field.name for field in fields}

    def head(self, body_length: int) -> bytes:
        head = self.heads.get(body_length)
        if head is None:
            head = _ext_header(len(self.tag) + body_length) + self.tag
            if len(self.heads) < 256:
                self.heads[body_length] = head
        return head


def _unset(_: object) -> Any:  # pragma: no cover - replaced before use
    raise AssertionError("codec entry not built")


class _Description:
    """What the handshake shows of a frozen registry, made once per process for equal registries."""

    __slots__ = ("hash", "packed", "schemas")

    def __init__(self) -> None:
        self.schemas: list[ClassSchema] | None = None
        self.packed: bytes | None = None
        self.hash: bytes | None = None


_DESCRIBED_MAX = 16
_described: dict[tuple[tuple[int, type, tuple[str, tuple[str, ...]]], ...], _Description] = {}
"""Descriptions of frozen registries by what they register (:meth:`Serialization._shared_description`), at most
:data:`_DESCRIBED_MAX` (registries come from the program, not the network)."""


class Serialization:
    """Registry of message types plus the codec; frozen once an end point starts using it.

    Not thread-safe by design: an end point drives it from one event loop.
    """

    def __init__(self) -> None:
        self._frozen = False
        self._hash: bytes | None = None
        self._ids: dict[type, int] = {}
        self._names: dict[int, tuple[str, tuple[str, ...]]] = {}
        self._classes: dict[int, type] = {}
        self._entries: dict[type, _Entry] = {}
        self._by_id: dict[int, _Entry] = {}
        self._decoders: dict[int, Callable[[Any], object]] = {}
        self._schemas: list[ClassSchema] | None = None
        self._packed: bytes | None = None
        self._highest_user_id = 0
        self.unreliable: frozenset[type] = frozenset()
        """Classes registered ``unreliable=True``: ``send`` sends them newest-wins (see ``send_unreliable``)."""
        self._depth = 0
        self._encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
        self._encode_msgspec: Callable[[object], bytes] = self._encoder.encode
        self._any_decoder = msgspec.msgpack.Decoder(ext_hook=self._ext_hook)
        self._typed_tags: dict[type, bytes] = {}
        """Typed classes: the native codec encodes these itself."""
        self.native_dispatch: Callable[..., None] | None = None
        """The native codec's poll-and-dispatch (``Codec.dispatch``), None without the native codec."""
        if _Codec is not None:
            codec = _Codec(
                self._typed_tags,
                self._encode_msgspec,
                self._decoders,
                self._encode_slow,
                self._decode_slow,
                SerializationError,
            )
            # The C methods themselves, so a hot caller's ``ser.encode`` is one native call.
            self.encode = codec.encode  # type: ignore[method-assign,assignment]
            self.decode = codec.decode  # type: ignore[method-assign,assignment]
            self.native_dispatch = codec.dispatch

    # ------------------------------------------------------------------------------------------- registry

    @overload
    def register(self, cls: type[T], *, type_id: int | None = None, unreliable: bool = False) -> type[T]: ...

    @overload
    def register(
        self, cls: None = None, *, type_id: int | None = None, unreliable: bool = False
    ) -> Callable[[type[T]], type[T]]: ...

    def register(
        self, cls: type[T] | None = None, *, type_id: int | None = None, unreliable: bool = False
    ) -> type[T] | Callable[[type[T]], type[T]]:
        """Register an attrs class under ``type_id`` (or the next id after the highest so far); returns the class.

        Usable as ``ser.register(Move)``, ``ser.register(Move, type_id=7)``, ``@ser.register`` and
        ``@ser.register(type_id=7)``. Registering a class again under its own id (or with no id) is a no-op.
        ``unreliable=True``: every ``send`` of the class is a ``send_unreliable`` (newest-wins, never waits); this
        end's choice only, not part of the registration hash.
        """
        if cls is None:

            def decorator(target: type[T]) -> type[T]:
                return self.register(target, type_id=type_id, unreliable=unreliable)

            return decorator
        self._check_class(cls, type_id)
        if unreliable:
            self.unreliable = self.unreliable | {cls}
        if type_id is None:
            existing = self._ids.get(cls)
            if existing is not None:
                return cls
            if self._highest_user_id >= USER_TYPE_ID_MAX:
                raise ConfigurationError(f"no free type id left for {_type_name(cls)} (highest is {USER_TYPE_ID_MAX})")
            type_id = self._highest_user_id + 1
        elif type(type_id) is not int or not USER_TYPE_ID_MIN <= type_id <= USER_TYPE_ID_MAX:
            raise ConfigurationError(
                f"type id {type_id!r} for {_type_name(cls)} is outside {USER_TYPE_ID_MIN}..{USER_TYPE_ID_MAX}"
            )
        if self._add(cls, type_id):
            self._highest_user_id = max(self._highest_user_id, type_id)
        return cls

    def register_internal(self, cls: type, type_id: int) -> None:
        """Register one of the end point's own control messages; ids 0x7F00..0x7FFF keep them clear of users'."""
        self._check_class(cls, type_id)
        if type(type_id) is not int or not INTERNAL_TYPE_ID_MIN <= type_id <= INTERNAL_TYPE_ID_MAX:
            raise ConfigurationError(
                f"internal type id {type_id!r} for {_type_name(cls)} is outside "
                f"{INTERNAL_TYPE_ID_MIN:#x}..{INTERNAL_TYPE_ID_MAX:#x}"
            )
        self._add(cls, type_id)

    def freeze(self) -> None:
        """Forbid further registrations: the registration hash has been (or is about to be) shown to peers."""
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    @property
    def registration_hash(self) -> bytes:
        """SHA-256 over :meth:`schemas` (names aside): peers with equal hashes read each other's messages as they
        are, with no check needed."""
        if self._hash is not None:
            return self._hash
        shared = self._shared_description()
        if shared is not None and shared.hash is not None:
            # Each client of a host's storm has a registry of its own: hashing the fields was 2% of its connect.
            self._hash = shared.hash
            return shared.hash
        body = msgspec.msgpack.encode(
            [_HASH_DOMAIN, [[s.type_id, [list(attrs.astuple(f)) for f in s.fields]] for s in self.schemas()]]
        )
        digest = hashlib.sha256(body).digest()
        if self._frozen:
            self._hash = digest
            if shared is not None:
                shared.hash = digest
        return digest

    def registrations(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """``(type_id, "module.QualName", field names)`` sorted by id."""
        return [(type_id, *self._names[type_id]) for type_id in sorted(self._names)]

    def schemas(self) -> list[ClassSchema]:
        """Every registered class's fields with their types and whether they have defaults, sorted by id: what
        the handshake compares (see :mod:`endpoint.schema`)."""
        if self._schemas is not None:
            return self._schemas
        shared = self._shared_description()
        if shared is not None and shared.schemas is not None:
            self._schemas = shared.schemas
            return shared.schemas
        name_of = self._type_ref
        schemas = [
            describe(self._classes[type_id], type_id, self._names[type_id][0], name_of)
            for type_id in sorted(self._classes)
        ]
        if self._frozen:
            self._schemas = schemas
            if shared is not None:
                shared.schemas = schemas
        return schemas

    def packed_schemas(self) -> bytes:
        """:meth:`schemas` packed for the handshake (:func:`endpoint.schema.pack`); made once when frozen."""
        packed = self._packed
        if packed is None:
            shared = self._shared_description()
            if shared is not None and shared.packed is not None:
                packed = self._packed = shared.packed
                return packed
            packed = pack(self.schemas())
            if self._frozen:
                self._packed = packed
                if shared is not None:
                    shared.packed = packed
        return packed

    def _shared_description(self) -> _Description | None:
        """The description of a frozen registry of the same classes under the same ids and names, made by any
        registry of this process (None while not frozen): a host's clients each have a registry of their own, and
        describing and packing the classes was a millisecond of every connect in a storm of hundreds."""
        if not self._frozen:
            return None
        key = tuple((type_id, self._classes[type_id], self._names[type_id]) for type_id in sorted(self._classes))
        shared = _described.get(key)
        if shared is None:
            if len(_described) >= _DESCRIBED_MAX:
                del _described[next(iter(_described))]
            shared = _described[key] = _Description()
        return shared

    def _type_ref(self, cls: type) -> str | None:
        type_id = self._ids.get(cls)
        return None if type_id is None else f"#{type_id}"

    def type_id_of(self, cls: type) -> int | None:
        return self._ids.get(cls)

    def _check_class(self, cls: type, type_id: int | None) -> None:
        if self._frozen:
            raise ConfigurationError(
                f"cannot register {_type_name(cls)} (type id {type_id}): the serialization is frozen"
            )
        if not isinstance(cls, type) or not attrs.has(cls):
            raise ConfigurationError(f"{cls!r} (type id {type_id}) is not an attrs class")

    def _add(self, cls: type, type_id: int) -> bool:
        """Record ``cls`` under ``type_id``; False when exactly that registration already exists."""
        name = _type_name(cls)
        existing_id = self._ids.get(cls)
        if existing_id == type_id:
            return False
        if existing_id is not None:
            raise ConfigurationError(f"{name} is already registered under type id {existing_id}, not {type_id}")
        taken_by = self._classes.get(type_id)
        if taken_by is not None:
            raise ConfigurationError(f"type id {type_id} for {name} is already taken by {_type_name(taken_by)}")
        fields = resolved_fields(cls)
        for field in fields:
            if not field.init:
                raise ConfigurationError(
                    f"{name} (type id {type_id}): field {field.name!r} has init=False; decoding builds "
                    "instances from the fields that arrive"
                )
        entry = _Entry(cls, type_id, name)
        self._build(entry)
        self._ids[cls] = type_id
        self._classes[type_id] = cls
        self._names[type_id] = (name, tuple(field.name for field in fields))
        self._entries[cls] = entry
        self._by_id[type_id] = entry
        self._decoders[type_id] = entry.decode
        if entry.typed:
            self._typed_tags[cls] = entry.tag
        self._hash = None
        self._schemas = None
        self._packed = None
        return True

    def _build(self, entry: _Entry) -> None:
        cls = entry.cls
        fields = resolved_fields(cls)
        try:
            # Any-typed fields included: msgspec hands the ext values found there to _ext_hook.
            decoder: msgspec.msgpack.Decoder[Any] | None = msgspec.msgpack.Decoder(cls, ext_hook=self._ext_hook)
        except Exception:  # a type msgspec cannot read (a union of attrs classes, no annotation...): Python reads it
            decoder = None
        if decoder is not None and _typed_class(cls, frozenset((cls,))):
            entry.typed = True
            entry.encode_body = self._encode_msgspec
            entry.decode = decoder.decode
            return
        # Dynamic: walk the fields that may hold registered objects (all of them when msgspec cannot read the
        # class: then nothing on the way in knows a field's class but the ext value's type id).
        plan = tuple(
            (
                field.name,
                decoder is None
                or field.type is None
                or field.name.startswith("_")
                or not _typed(field.type, frozenset((cls,))),
            )
            for field in fields
        )

        def encode_body(obj: object) -> bytes:
            walk = self._walk
            return self._encode_msgspec(
                {name: walk(getattr(obj, name)) if walked else getattr(obj, name) for name, walked in plan}
            )

        entry.encode_body = encode_body
        if decoder is not None:
            entry.decode = decoder.decode
            return
        names = tuple(entry.init_names.items())
        any_decode = self._any_decoder.decode

        def decode(data: Any) -> object:
            fields = any_decode(data)
            if type(fields) is not dict:
                raise SerializationError(f"malformed {entry.name}: expected a map of its fields")
            return cls(**{alias: fields[name] for name, alias in names if name in fields})

        entry.decode = decode

    # ------------------------------------------------------------------------------------------- codec

    def encode(self, message: object) -> bytes:
        """One msgpack object; a registered top-level message is its header and one msgspec call.

        Raises SerializationError for what cannot be encoded (naming the type). With the native codec built, the
        instance's ``encode`` is its C method, which does typed classes and hands the rest to :meth:`_encode_slow`.
        """
        return self._encode_slow(message)

    def decode(self, data: bytes | bytearray | memoryview) -> object:
        """Inverse of :meth:`encode`; any failure on (untrusted) input is a SerializationError. With the native
        codec built, the instance's ``decode`` is its C method (the common header read without a Python frame)."""
        return self._decode_slow(data)

    def _encode_slow(self, message: object) -> bytes:
        entry = self._entries.get(type(message))
        if entry is None:
            return self._encode_plain(message)
        self._depth = 1
        try:
            body = entry.encode_body(message)
        except SerializationError:
            raise
        except Exception as exc:
            raise _encode_error(entry.name, exc) from exc
        finally:
            self._depth = 0
        length = len(body)
        heads = entry.heads
        head = heads.get(length)
        if head is None:
            head = entry.head(length)
        return head + body

    def _decode_slow(self, data: bytes | bytearray | memoryview) -> object:
        try:
            first = data[0]
            if first == 0xC7 and data[2] == ATTRS_EXT and len(data) == data[1] + 3:
                start = 3
            elif first == 0xC8 and data[3] == ATTRS_EXT and len(data) == (data[1] << 8 | data[2]) + 4:
                start = 4
            else:
                return self._any_decoder.decode(data)
            if len(data) <= start:
                raise SerializationError("malformed registered object: empty")
            tag = data[start]
            if tag < 0x80:
                start += 1
            elif tag == 0xCD:
                tag = data[start + 1] << 8 | data[start + 2]
                start += 3
            elif tag == 0xCC:
                tag = data[start + 1]
                start += 2
            else:
                raise SerializationError(f"malformed registered object: no type id (starts with {tag:#x})")
            decode = self._decoders.get(tag)
            if decode is None:
                raise SerializationError(f"unknown type id {tag}")
            return decode(data[start:])
        except SerializationError:
            raise
        except Exception as exc:
            # Untrusted input: msgspec's errors, ValueError, TypeError, IndexError, errors of attrs validators...
            raise SerializationError(f"malformed message: {type(exc).__name__}: {exc}") from exc

    def _ext_hook(self, code: int, data: memoryview) -> object:
        """A registered object nested in a dynamic field or a plain message."""
        if code != ATTRS_EXT:
            raise SerializationError(f"unknown msgpack ext code {code}")
        level = self._depth + 1
        if level > MAX_NESTING:
            raise SerializationError(f"registered objects nested deeper than {MAX_NESTING} levels")
        if not len(data):
            raise SerializationError("malformed registered object: empty")
        tag = data[0]
        start = 1
        if tag == 0xCD and len(data) >= 3:
            tag = data[1] << 8 | data[2]
            start = 3
        elif tag == 0xCC and len(data) >= 2:
            tag = data[1]
            start = 2
        elif tag >= 0x80:
            raise SerializationError(f"malformed registered object: no type id (starts with {tag:#x})")
        decode = self._decoders.get(tag)
        if decode is None:
            raise SerializationError(f"unknown type id {tag}")
        self._depth = level
        try:
            return decode(data[start:])
        finally:
            self._depth = level - 1

    def _encode_plain(self, message: object) -> bytes:
        self._depth = 0
        try:
            return self._encode_msgspec(self._walk(message))
        except SerializationError:
            raise
        except Exception as exc:
            raise _encode_error(_type_name(type(message)), exc) from exc

    def _walk(self, value: object) -> object:
        """A value of a dynamic field or plain message, with every registered object in it made an ext value."""
        cls = type(value)
        if cls in _SCALARS:
            return value
        entry = self._entries.get(cls)
        if entry is not None:
            if entry.typed and self._depth < MAX_NESTING:  # nothing inside to walk, no level to count
                return _Ext(ATTRS_EXT, entry.tag + self._encode_msgspec(value))
            return _Ext(ATTRS_EXT, self._nested(entry, value))
        if cls is list or cls is tuple:
            walk = self._walk
            return [item if type(item) in _SCALARS else walk(item) for item in value]  # type: ignore[attr-defined]
        if cls is dict:
            return {self._key(key): self._walk(item) for key, item in value.items()}  # type: ignore[attr-defined]
        if attrs.has(cls):  # msgspec would write it as a map, which decodes as a dict: refuse, as for a class
            raise SerializationError(f"cannot encode {_type_name(cls)}: unregistered attrs class")
        return value  # msgspec encodes it, or _enc_hook names why not

    def _key(self, key: object) -> object:
        entry = self._entries.get(type(key))
        if entry is not None:
            return _ExtKey(self._nested(entry, key))
        return key

    def _nested(self, entry: _Entry, obj: object) -> bytes:
        level = self._depth + 1
        if level > MAX_NESTING:
            raise SerializationError(f"registered objects nested deeper than {MAX_NESTING} levels")
        self._depth = level
        try:
            return entry.tag + entry.encode_body(obj)
        finally:
            self._depth = level - 1
