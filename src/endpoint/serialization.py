"""Message codec of the end points: msgpack, with attrs classes registered under small integer ids.

A registered attrs instance travels as a msgpack ext value (code :data:`ATTRS_EXT`) whose data is the msgpack
array ``[type_id, field0, field1, ...]`` in attrs field order; everything else is plain msgpack. Both peers must
register the same classes under the same ids, which :attr:`Serialization.registration_hash` lets the handshake check.

The hot path (one small registered message) is tuned for pure Python: per-class ``attrgetter`` and constructor
lookups, a reusable packer, and the outer ext header written by hand rather than through ``msgpack.ExtType``.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable
from typing import Any, Final, TypeVar, overload

import attrs
import msgpack  # type: ignore[import-untyped]

from endpoint.errors import ConfigurationError, SerializationError

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
"""Most registered objects nested inside one another in one message.

Each level costs one C-level ``unpackb`` frame of ~45 KiB of stack, so a few hundred levels of hostile input
would overflow the C stack and kill the process; the limit keeps decode far away from that.
"""

_HASH_DOMAIN: Final = b"endpoint.serialization.v1"

_unpackb: Final[Callable[..., Any]] = msgpack.unpackb
_ExtType: Final[type] = msgpack.ExtType
# msgpack.ExtType.__new__ only validates in Python (code is our constant, data comes from a packer): skip it.
_new_tuple: Final = tuple.__new__


def _ext_header(length: int) -> bytes:
    """Header msgpack itself writes for an ext value of code ATTRS_EXT with ``length`` data bytes."""
    fixext = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}.get(length)
    if fixext is not None:
        return bytes((fixext, ATTRS_EXT))
    if length <= 0xFF:
        return bytes((0xC7, length, ATTRS_EXT))
    if length <= 0xFFFF:
        return b"\xc8" + length.to_bytes(2, "big") + bytes((ATTRS_EXT,))
    if length <= 0xFFFFFFFF:
        return b"\xc9" + length.to_bytes(4, "big") + bytes((ATTRS_EXT,))
    raise SerializationError(f"registered object too large to encode: {length} bytes")


_EXT_HEADERS: Final = tuple(_ext_header(n) for n in range(256))


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _tuple_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """``attrgetter`` returns a bare value for one name and refuses none; always give back a tuple."""
    if len(names) >= 2:
        return operator.attrgetter(*names)
    if len(names) == 1:
        single = operator.attrgetter(names[0])
        return lambda obj: (single(obj),)
    return lambda obj: ()


def _make_decoder(
    by_id: dict[int, tuple[type, int]],
) -> tuple[Callable[[int, bytes], object], Callable[[Any], object]]:
    """Build the ext hook and the top-level fast path; closures keep the per-call lookups to cell loads."""
    depth = 0

    def unpack_attrs(data: Any) -> object:
        nonlocal depth
        if depth >= MAX_NESTING:
            raise SerializationError(f"registered objects nested deeper than {MAX_NESTING} levels")
        depth += 1
        try:
            values = _unpackb(data, ext_hook=ext_hook, raw=False, strict_map_key=False)
        finally:
            depth -= 1
        if type(values) is not list or not values:
            raise SerializationError("malformed registered object: expected a non-empty array")
        try:
            cls, length = by_id[values[0]]
        except (KeyError, TypeError):
            raise SerializationError(f"unknown type id {values[0]!r:.40}") from None
        if len(values) != length:
            raise SerializationError(
                f"type id {values[0]} ({_type_name(cls)}) has {length - 1} fields, got {len(values) - 1}"
            )
        return cls(*values[1:])

    def ext_hook(code: int, data: bytes) -> object:
        if code != ATTRS_EXT:
            raise SerializationError(f"unknown msgpack ext code {code}")
        return unpack_attrs(data)

    return ext_hook, unpack_attrs


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
        self._encoders: dict[type, tuple[tuple[int], Callable[[Any], tuple[Any, ...]]]] = {}
        self._constructors: dict[int, tuple[type, int]] = {}
        self._highest_user_id = 0
        self.unreliable: frozenset[type] = frozenset()
        """Classes registered ``unreliable=True``: ``send`` sends them newest-wins (see ``send_unreliable``)."""
        # One packer per nesting level: a packer cannot be re-entered from its own ``default``.
        self._packers: list[Any] = [self._new_packer()]
        self._pack_top: Callable[[object], bytes] = self._packers[0].pack
        # Ext levels open while a packer runs; a registered top-level message counts as level 1.
        self._depth = 1
        self._ext_hook, self._unpack_attrs = _make_decoder(self._constructors)

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
        """SHA-256 over :meth:`registrations`; peers with equal hashes decode each other's messages."""
        if self._hash is not None:
            return self._hash
        body = msgpack.packb([_HASH_DOMAIN, [list(r) for r in self.registrations()]], use_bin_type=True)
        digest = hashlib.sha256(body).digest()
        if self._frozen:
            self._hash = digest
        return digest

    def registrations(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """``(type_id, "module.QualName", field names)`` sorted by id: exactly what the hash covers."""
        return [(type_id, *self._names[type_id]) for type_id in sorted(self._names)]

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
        fields = attrs.fields(cls)
        for field in fields:
            if not field.init:
                raise ConfigurationError(
                    f"{name} (type id {type_id}): field {field.name!r} has init=False; decoding builds "
                    "instances positionally from every field"
                )
            if field.kw_only:
                raise ConfigurationError(
                    f"{name} (type id {type_id}): field {field.name!r} is keyword-only; decoding builds "
                    "instances positionally from every field"
                )
        names = tuple(field.name for field in fields)
        self._ids[cls] = type_id
        self._classes[type_id] = cls
        self._names[type_id] = (name, names)
        self._encoders[cls] = ((type_id,), _tuple_getter(names))
        self._constructors[type_id] = (cls, len(names) + 1)
        self._hash = None
        return True

    # ------------------------------------------------------------------------------------------- codec

    def encode(self, message: object) -> bytes:
        """One msgpack object; a registered top-level message skips ``default`` and ``ExtType`` entirely."""
        try:
            head, getter = self._encoders[type(message)]
        except KeyError:
            return self._encode_plain(message)
        try:
            inner = self._pack_top(head + getter(message))
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"cannot encode {_type_name(type(message))}: {exc}") from exc
        length = len(inner)
        if length < 256:
            return _EXT_HEADERS[length] + inner
        return _ext_header(length) + inner

    def decode(self, data: bytes | bytearray | memoryview) -> object:
        """Inverse of :meth:`encode`; any failure on (untrusted) input is a SerializationError."""
        try:
            # Fast path: the whole message is one registered object in an ext8 or fixext frame.
            first = data[0]
            if first == 0xC7:
                if data[2] == ATTRS_EXT and len(data) == data[1] + 3:
                    return self._unpack_attrs(data[3:])
            elif 0xD4 <= first <= 0xD8 and data[1] == ATTRS_EXT and len(data) == (1 << (first - 0xD4)) + 2:
                return self._unpack_attrs(data[2:])
            return _unpackb(data, ext_hook=self._ext_hook, raw=False, strict_map_key=False)
        except SerializationError:
            raise
        except Exception as exc:
            # Untrusted input: msgpack's errors, ValueError, TypeError, IndexError, errors of attrs validators...
            raise SerializationError(f"malformed message: {type(exc).__name__}: {exc}") from exc

    def _encode_plain(self, message: object) -> bytes:
        self._depth = 0
        try:
            return self._pack_top(message)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"cannot encode {_type_name(type(message))}: {exc}") from exc
        finally:
            self._depth = 1

    def _default(self, obj: object) -> object:
        """Packer fallback: registered attrs instances nested in a message become ext values."""
        try:
            head, getter = self._encoders[type(obj)]
        except KeyError:
            if isinstance(obj, int):  # msgpack hands ints beyond 64 bits to ``default``
                raise SerializationError(f"cannot encode int {obj:.3g}: outside msgpack's 64-bit range") from None
            kind = "unregistered attrs class" if attrs.has(type(obj)) else "unsupported type"
            raise SerializationError(f"cannot encode {_type_name(type(obj))}: {kind}") from None
        level = self._depth + 1
        if level > MAX_NESTING:
            raise SerializationError(f"registered objects nested deeper than {MAX_NESTING} levels")
        packers = self._packers
        if level >= len(packers):
            packers.extend(self._new_packer() for _ in range(level + 1 - len(packers)))
        self._depth = level
        try:
            inner = packers[level].pack(head + getter(obj))
        finally:
            self._depth = level - 1
        return _new_tuple(_ExtType, (ATTRS_EXT, inner))

    def _new_packer(self) -> Any:
        return msgpack.Packer(default=self._default, use_bin_type=True, autoreset=True)
