"""The base classes every generated flyweight derives from: wrapping, lengths, and the slow generic paths.

A flyweight holds a buffer, an offset and (for a message) a limit: the position where the next group or
variable-length field starts. Generated subclasses add one property per field, closed over a precomputed
:class:`struct.Struct` and offset, so reading a field allocates nothing but the value itself. Groups and
variable-length data advance the message's limit as they are read or written, which is why SBE wants them in schema
order.

For the type checker the generated attributes are ``Any`` (the classes are made at import time from the XML); the
methods and properties defined here are typed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from driver.sbe.errors import SbeDecodeError, SbeEncodeError, SbeSchemaIdMismatchError, SbeUnknownTemplateError

__all__ = [
    "Buffer",
    "CompositeDecoder",
    "CompositeEncoder",
    "GroupDecoder",
    "GroupEncoder",
    "MessageDecoder",
    "MessageEncoder",
    "WritableBuffer",
    "as_buffer",
]

Buffer = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview


class _ViewableBuffer(Protocol):
    """What an ``AtomicBuffer`` offers: a capacity and a memoryview over part of it."""

    @property
    def capacity(self) -> int: ...

    def view(self, index: int, length: int, /) -> memoryview: ...


def as_buffer(buffer: Buffer | _ViewableBuffer) -> Buffer:
    """A bytes-like object over ``buffer``: itself, or the whole view of a buffer object that offers one."""
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        return buffer
    return buffer.view(0, buffer.capacity)


def _capacity(buffer: Buffer) -> int:
    return buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)


# Readers of a block's fields for the slow generic paths: (python name, getter) in schema order.
FieldReaders = tuple[tuple[str, Callable[[Any], Any]], ...]
FieldWriters = tuple[tuple[str, Callable[[Any, Any], None], bool], ...]
"""(python name, setter, required) for the fields that take a value."""


class _Block:
    """Shared state of a message or a group entry: where its block is and how to reach the message's limit."""

    __slots__ = ("_buffer", "_composites", "_groups", "_msg", "_offset", "_version")

    _buffer: Any
    _offset: int
    _version: int
    _msg: Any
    _composites: tuple[Any, ...]
    _groups: tuple[Any, ...]

    _FIELD_READERS: ClassVar[FieldReaders] = ()
    _CONSTANT_NAMES: ClassVar[tuple[str, ...]] = ()
    FIELD_NAMES: ClassVar[tuple[str, ...]] = ()
    """The Python names of the block's fields (constants aside), in schema order: what ``read_fields()`` returns and
    ``write_fields(*values)`` takes."""
    _GROUP_NAMES: ClassVar[tuple[str, ...]] = ()
    _DATA_NAMES: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...

    def _values(self) -> dict[str, Any]:
        """Every field, group and var data of this block in schema order (advances the message's limit)."""
        out: dict[str, Any] = {name: read(self) for name, read in self._FIELD_READERS}
        for name in self._GROUP_NAMES:
            out[name] = [entry._values() for entry in getattr(self, name)()]
        for name in self._DATA_NAMES:
            out[name] = getattr(self, name)()
        return out


class MessageDecoder(_Block):
    """Reads one message of a schema in place; re-``wrap`` it for the next message (no allocation)."""

    __slots__ = ("_block_length", "_capacity", "_limit")

    NAME: ClassVar[str] = ""
    TEMPLATE_ID: ClassVar[int] = 0
    BLOCK_LENGTH: ClassVar[int] = 0
    SCHEMA_ID: ClassVar[int] = 0
    SCHEMA_VERSION: ClassVar[int] = 0
    SINCE_VERSION: ClassVar[int] = 0
    HEADER_LENGTH: ClassVar[int] = 8
    _HEADER_READ: ClassVar[Callable[[Any, int], tuple[int, int, int, int]]]
    _REQUIRED_BLOCK: ClassVar[tuple[int, ...]] = ()
    """Per acting version (index, capped at the schema's), the block length its fields need."""

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._version = 0
        self._limit = 0
        self._block_length = 0
        self._capacity = 0
        self._msg = self
        self._init_children()

    def _init_children(self) -> None:
        self._composites = ()
        self._groups = ()

    def wrap(
        self, buffer: Buffer | _ViewableBuffer, offset: int, acting_block_length: int, acting_version: int
    ) -> Self:
        """Read the message whose block starts at ``offset``, sent with that block length and schema version.

        A block longer than this schema's (a newer peer) is skipped over to its groups and data; fields newer
        than ``acting_version`` read as their null value. Raises :class:`SbeDecodeError` when the block does not
        fit the buffer or is too short for the fields the acting version has.
        """
        try:
            capacity = len(buffer)  # type: ignore[arg-type]
        except TypeError:
            buffer = as_buffer(buffer)
            capacity = len(buffer)
        limit = offset + acting_block_length
        if limit > capacity or offset < 0 or acting_block_length < self.BLOCK_LENGTH:
            self._check_wrap(capacity, offset, acting_block_length, acting_version)
        self._buffer = buffer
        self._offset = offset
        self._version = acting_version
        self._block_length = acting_block_length
        self._capacity = capacity
        self._limit = limit
        return self

    def _check_wrap(self, capacity: int, offset: int, acting_block_length: int, acting_version: int) -> None:
        if offset < 0 or offset + acting_block_length > capacity:
            raise SbeDecodeError(
                f"{self.NAME}: block of {acting_block_length} bytes at offset {offset} exceeds the buffer of {capacity}"
            )
        self._check_block(acting_block_length, acting_version, self._REQUIRED_BLOCK, self.NAME)

    @staticmethod
    def _check_block(block_length: int, version: int, required: Sequence[int], what: str) -> None:
        need = required[min(max(version, 0), len(required) - 1)] if required else 0
        if block_length < need:
            raise SbeDecodeError(
                f"{what}: block length {block_length} is shorter than version {version} needs ({need})"
            )

    def wrap_and_check_header(self, buffer: Buffer | _ViewableBuffer, offset: int) -> Self:
        """Read the message header at ``offset``, check it names this message, and wrap the body after it."""
        if not isinstance(buffer, (bytes, bytearray, memoryview)):
            buffer = as_buffer(buffer)
        if offset < 0 or offset + self.HEADER_LENGTH > _capacity(buffer):
            raise SbeDecodeError(f"{self.NAME}: no room for a message header at offset {offset}")
        block_length, template_id, schema_id, version = type(self)._HEADER_READ(buffer, offset)
        if schema_id != self.SCHEMA_ID:
            raise SbeSchemaIdMismatchError(self.SCHEMA_ID, schema_id, template_id)
        if template_id != self.TEMPLATE_ID:
            raise SbeUnknownTemplateError(template_id, schema_id, version)
        return self.wrap(buffer, offset + self.HEADER_LENGTH, block_length, version)

    @property
    def buffer(self) -> Buffer:
        return self._buffer  # type: ignore[no-any-return]

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def acting_block_length(self) -> int:
        return self._block_length

    @property
    def acting_version(self) -> int:
        return self._version

    @property
    def limit(self) -> int:
        """Where the next group or var data starts (after all of them are read: where the message ends)."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value

    @property
    def encoded_length(self) -> int:
        """Bytes of the message body read so far (all of it, once its groups and var data are read); no header."""
        return self._limit - self._offset

    def skip(self) -> int:
        """Read past every group and var data without keeping them; returns :attr:`encoded_length`."""
        self._limit = self._offset + self._block_length
        self._values()
        return self._limit - self._offset

    def to_dict(self) -> dict[str, Any]:
        """Every field, group (a list of dicts) and var data in schema order; rereads from the block's end."""
        self._limit = self._offset + self._block_length
        return self._values()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} offset={self._offset} version={self._version}>"


class MessageEncoder(_Block):
    """Writes one message of a schema in place: fields by assignment, then groups and var data in order."""

    __slots__ = ("_capacity", "_limit")

    NAME: ClassVar[str] = ""
    TEMPLATE_ID: ClassVar[int] = 0
    BLOCK_LENGTH: ClassVar[int] = 0
    SCHEMA_ID: ClassVar[int] = 0
    SCHEMA_VERSION: ClassVar[int] = 0
    SINCE_VERSION: ClassVar[int] = 0
    HEADER_LENGTH: ClassVar[int] = 8
    _HEADER_WRITE: ClassVar[Callable[[Any, int, int, int, int, int], None]]
    _HEADER_BYTES: ClassVar[bytes] = b""
    """This message's header (block length, template id, schema id and version), encoded once."""
    _FIELD_WRITERS: ClassVar[FieldWriters] = ()

    if TYPE_CHECKING:

        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self) -> None:
        object.__setattr__(self, "_buffer", bytearray())
        object.__setattr__(self, "_offset", 0)
        object.__setattr__(self, "_version", 1 << 30)  # reading a field back sees every version's fields
        object.__setattr__(self, "_limit", 0)
        object.__setattr__(self, "_capacity", 0)
        object.__setattr__(self, "_msg", self)
        self._init_children()

    def _init_children(self) -> None:
        self._composites = ()
        self._groups = ()

    def wrap(self, buffer: WritableBuffer | _ViewableBuffer, offset: int) -> Self:
        """Write the message body at ``offset`` (no header); raises :class:`SbeEncodeError` if its block won't fit."""
        try:
            capacity = len(buffer)  # type: ignore[arg-type]
        except TypeError:
            buffer = as_buffer(buffer)  # type: ignore[assignment]
            capacity = len(buffer)  # type: ignore[arg-type]
        limit = offset + self.BLOCK_LENGTH
        if offset < 0 or limit > capacity or isinstance(buffer, bytes):
            self._refuse(buffer, offset, capacity)
        self._buffer = buffer
        self._offset = offset
        self._capacity = capacity
        self._limit = limit
        return self

    def wrap_and_apply_header(self, buffer: WritableBuffer | _ViewableBuffer, offset: int) -> Self:
        """Write the message header at ``offset`` (this message's block length, ids, version), then wrap after it."""
        try:
            capacity = len(buffer)  # type: ignore[arg-type]
        except TypeError:
            buffer = as_buffer(buffer)  # type: ignore[assignment]
            capacity = len(buffer)  # type: ignore[arg-type]
        body = offset + self.HEADER_LENGTH
        limit = body + self.BLOCK_LENGTH
        if offset < 0 or limit > capacity or isinstance(buffer, bytes):
            self._refuse(buffer, offset, capacity)
        buffer[offset:body] = self._HEADER_BYTES  # type: ignore[index]
        self._buffer = buffer
        self._offset = body
        self._capacity = capacity
        self._limit = limit
        return self

    def _refuse(self, buffer: object, offset: int, capacity: int) -> None:
        if type(buffer) is bytes:
            raise SbeEncodeError(f"{self.NAME}: cannot encode into read-only bytes")
        raise SbeEncodeError(f"{self.NAME}: message block at offset {offset} exceeds the buffer of {capacity}")

    @property
    def buffer(self) -> WritableBuffer:
        return self._buffer  # type: ignore[no-any-return]

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value

    @property
    def encoded_length(self) -> int:
        """Bytes of the message body written so far (no header)."""
        return self._limit - self._offset

    def encode(self, values: Mapping[str, Any]) -> Self:
        """Set every field, group (a sequence of mappings) and var data from ``values``, by Python name.

        The slow, generic path (tests, tools, the catalog): an absent optional field is written null, an absent
        required field is an :class:`SbeEncodeError`, absent var data is written empty.
        """
        _encode_block(self, values)
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__name__} offset={self._offset} limit={self._limit}>"


def _encode_block(block: Any, values: Mapping[str, Any]) -> None:
    cls = type(block)
    known = {name for name, _, _ in cls._FIELD_WRITERS} | set(cls._GROUP_NAMES) | set(cls._DATA_NAMES)
    known |= set(cls._CONSTANT_NAMES)
    unknown = set(values) - known
    if unknown:
        raise SbeEncodeError(f"{cls.NAME}: no field named {sorted(unknown)}")
    for name, write, required in cls._FIELD_WRITERS:
        if name in values:
            write(block, values[name])
        elif required:
            raise SbeEncodeError(f"{cls.NAME}: required field {name!r} has no value")
        else:
            write(block, None)
    for name in cls._GROUP_NAMES:
        entries = values.get(name, ())
        group = getattr(block, name + "_count")(len(entries))
        for entry in entries:
            _encode_block(group.next(), entry)
    for name in cls._DATA_NAMES:
        getattr(block, "put_" + name)(values.get(name, b""))


class GroupDecoder(_Block):
    """The entries of one repeating group, read in place; iterate it (each step moves to the next entry)."""

    __slots__ = ("_count", "_entry_length", "_index")

    NAME: ClassVar[str] = ""
    BLOCK_LENGTH: ClassVar[int] = 0

    def __init__(self, msg: Any) -> None:
        self._buffer = b""
        self._offset = 0
        self._version = 0
        self._msg = msg
        self._count = 0
        self._index = 0
        self._entry_length = 0
        self._composites = ()
        self._groups = ()

    @property
    def count(self) -> int:
        return self._count

    @property
    def acting_block_length(self) -> int:
        return self._entry_length

    def has_next(self) -> bool:
        return self._index < self._count

    def next(self) -> Self:
        """Move to the next entry; :class:`SbeDecodeError` past the last one."""
        if self._index >= self._count:
            raise SbeDecodeError(f"{self.NAME}: read past the group's {self._count} entries")
        msg = self._msg
        offset = msg._limit
        limit = offset + self._entry_length
        if limit > msg._capacity:
            raise SbeDecodeError(f"{self.NAME}: entry at {offset} exceeds the buffer of {msg._capacity}")
        self._offset = offset
        msg._limit = limit
        self._index += 1
        return self

    def __iter__(self) -> Iterator[Self]:
        while self._index < self._count:
            yield self.next()

    def __len__(self) -> int:
        return self._count


class GroupEncoder(_Block):
    """Writes the entries of one repeating group; call :meth:`next` before each entry's fields."""

    __slots__ = ("_count", "_index")

    NAME: ClassVar[str] = ""
    BLOCK_LENGTH: ClassVar[int] = 0
    _FIELD_WRITERS: ClassVar[FieldWriters] = ()

    if TYPE_CHECKING:

        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self, msg: Any) -> None:
        object.__setattr__(self, "_buffer", bytearray())
        object.__setattr__(self, "_offset", 0)
        object.__setattr__(self, "_version", 1 << 30)
        object.__setattr__(self, "_msg", msg)
        object.__setattr__(self, "_count", 0)
        object.__setattr__(self, "_index", 0)
        object.__setattr__(self, "_composites", ())
        object.__setattr__(self, "_groups", ())

    @property
    def count(self) -> int:
        return int(self._count)

    def next(self) -> Self:
        """Start the next entry; :class:`SbeEncodeError` past the count given, or when it won't fit."""
        if self._index >= self._count:
            raise SbeEncodeError(f"{self.NAME}: more entries than the count of {self._count}")
        msg = self._msg
        offset = msg._limit
        limit = offset + self.BLOCK_LENGTH
        if limit > msg._capacity:
            raise SbeEncodeError(f"{self.NAME}: entry at {offset} exceeds the buffer of {msg._capacity}")
        self._buffer = msg._buffer
        self._offset = offset
        msg._limit = limit
        self._index += 1
        return self


class CompositeDecoder:
    """A composite field read in place (a reused view: each access to the field re-aims it)."""

    __slots__ = ("_buffer", "_composites", "_offset", "_version")

    NAME: ClassVar[str] = ""
    ENCODED_LENGTH: ClassVar[int] = 0
    _FIELD_READERS: ClassVar[FieldReaders] = ()

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self) -> None:
        self._buffer: Any = b""
        self._offset = 0
        self._version = 1 << 30
        self._composites: tuple[Any, ...] = ()

    def wrap(self, buffer: Buffer | _ViewableBuffer, offset: int) -> Self:
        buffer = as_buffer(buffer)
        if offset < 0 or offset + self.ENCODED_LENGTH > _capacity(buffer):
            raise SbeDecodeError(f"{self.NAME}: {self.ENCODED_LENGTH} bytes at offset {offset} exceed the buffer")
        self._buffer = buffer
        self._offset = offset
        return self

    def to_dict(self) -> dict[str, Any]:
        return {name: read(self) for name, read in self._FIELD_READERS}


class CompositeEncoder:
    """A composite field written in place."""

    __slots__ = ("_buffer", "_composites", "_offset")

    NAME: ClassVar[str] = ""
    ENCODED_LENGTH: ClassVar[int] = 0
    _FIELD_WRITERS: ClassVar[FieldWriters] = ()
    _CONSTANT_NAMES: ClassVar[tuple[str, ...]] = ()
    _GROUP_NAMES: ClassVar[tuple[str, ...]] = ()
    _DATA_NAMES: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:

        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self) -> None:
        object.__setattr__(self, "_buffer", bytearray())
        object.__setattr__(self, "_offset", 0)
        object.__setattr__(self, "_composites", ())

    def wrap(self, buffer: WritableBuffer | _ViewableBuffer, offset: int) -> Self:
        viewed = as_buffer(buffer)
        if isinstance(viewed, bytes) or offset < 0 or offset + self.ENCODED_LENGTH > _capacity(viewed):
            raise SbeEncodeError(f"{self.NAME}: {self.ENCODED_LENGTH} bytes at offset {offset} do not fit")
        self._buffer = viewed
        self._offset = offset
        return self

    def encode(self, values: Mapping[str, Any]) -> Self:
        _encode_block(self, values)
        return self


def struct_error(what: str, value: object, exc: Exception) -> SbeEncodeError:
    """The typed error for a value :mod:`struct` refused."""
    return SbeEncodeError(f"{what}: cannot encode {value!r}: {exc}")
