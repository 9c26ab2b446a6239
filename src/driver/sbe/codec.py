"""Flyweight classes made from a parsed schema: one decoder and one encoder class per message, group and composite.

Every field becomes a property whose getter (and setter) closes over a :class:`struct.Struct` method and the
field's offset, computed once here; the hot path is then an attribute load, one ``unpack_from`` or ``pack_into`` and
an index, with no dictionary lookup and no object but the value. Groups and variable-length data become methods,
because reading or writing them moves the message's limit (they must be visited in schema order).
"""

from __future__ import annotations

import codecs
import enum
import functools
import importlib.resources
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from driver.sbe.errors import (
    SbeDecodeError,
    SbeEncodeError,
    SbeSchemaError,
    SbeSchemaIdMismatchError,
    SbeUnknownTemplateError,
)
from driver.sbe.flyweight import (
    Buffer,
    CompositeDecoder,
    CompositeEncoder,
    GroupDecoder,
    GroupEncoder,
    MessageDecoder,
    MessageEncoder,
    WritableBuffer,
    as_buffer,
    struct_error,
)
from driver.sbe.schema import (
    Composite,
    EncodedType,
    EnumType,
    Field,
    Group,
    Message,
    Schema,
    SetType,
    TypeDef,
    VarData,
    parse_schema,
    snake_case,
)

__all__ = [
    "Dispatcher",
    "MessageCodec",
    "MessageHeader",
    "MessageSchema",
    "load_schema",
    "load_schema_resource",
]

Getter = Callable[[Any], Any]
Setter = Callable[[Any, Any], None]

_RESERVED = frozenset(
    name
    for cls in (MessageDecoder, MessageEncoder, GroupDecoder, GroupEncoder, CompositeDecoder, CompositeEncoder)
    for klass in cls.__mro__
    for name in vars(klass)
) | {"next", "count", "limit", "offset", "buffer", "encode", "wrap"}


def _python_name(name: str) -> str:
    """The attribute name of a schema element: snake case, with ``_`` appended where it would shadow the API."""
    py = snake_case(name)
    if not py.isidentifier():
        raise SbeSchemaError(f"{name!r} does not make a Python identifier")
    return py + "_" if py in _RESERVED or py.startswith("_") else py


def _python_encoding(name: str | None) -> str:
    if name is None:
        return "ascii"
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise SbeSchemaError(f"unknown characterEncoding {name!r}") from None


class MessageHeader(NamedTuple):
    block_length: int
    template_id: int
    schema_id: int
    version: int


# -- accessors of one field ----------------------------------------------------------------------------------------


def _scalar_accessors(what: str, code: str, order: str, offset: int, since: int, null: Any) -> tuple[Getter, Setter]:
    s = struct.Struct(order + code)
    unpack = s.unpack_from
    pack = s.pack_into

    if since > 0:

        def get(self: Any) -> Any:
            if self._version < since:
                return null
            return unpack(self._buffer, self._offset + offset)[0]

    else:

        def get(self: Any) -> Any:
            return unpack(self._buffer, self._offset + offset)[0]

    def put(self: Any, value: Any) -> None:
        try:
            pack(self._buffer, self._offset + offset, value)
        except struct.error as exc:
            if value is None:
                pack(self._buffer, self._offset + offset, null)
                return
            raise struct_error(what, value, exc) from None

    return get, put


def _text_accessors(what: str, length: int, encoding: str, offset: int, since: int) -> tuple[Getter, Setter]:
    s = struct.Struct(f"{length}s")
    unpack = s.unpack_from
    pack = s.pack_into

    def get(self: Any) -> Any:
        if self._version < since:
            return ""
        raw: bytes = unpack(self._buffer, self._offset + offset)[0]
        end = raw.find(0)
        if end >= 0:
            raw = raw[:end]
        return raw.decode(encoding, "replace")

    def put(self: Any, value: Any) -> None:
        if value is None:
            value = b""
        try:
            data = value.encode(encoding) if isinstance(value, str) else bytes(value)
        except (UnicodeError, TypeError) as exc:
            raise struct_error(what, value, exc) from None
        if len(data) > length:
            raise SbeEncodeError(f"{what}: {len(data)} bytes do not fit its {length}")
        pack(self._buffer, self._offset + offset, data)

    return get, put


def _bytes_accessors(what: str, length: int, offset: int, since: int) -> tuple[Getter, Setter]:
    s = struct.Struct(f"{length}s")
    unpack = s.unpack_from
    pack = s.pack_into

    def get(self: Any) -> Any:
        if self._version < since:
            return b""
        return unpack(self._buffer, self._offset + offset)[0]

    def put(self: Any, value: Any) -> None:
        data = b"" if value is None else bytes(value)
        if len(data) > length:
            raise SbeEncodeError(f"{what}: {len(data)} bytes do not fit its {length}")
        pack(self._buffer, self._offset + offset, data)

    return get, put


def _array_accessors(
    what: str, code: str, length: int, order: str, offset: int, since: int, null: Any
) -> tuple[Getter, Setter]:
    s = struct.Struct(f"{order}{length}{code}")
    unpack = s.unpack_from
    pack = s.pack_into
    nulls = (null,) * length

    def get(self: Any) -> Any:
        if self._version < since:
            return nulls
        return unpack(self._buffer, self._offset + offset)

    def put(self: Any, value: Any) -> None:
        items = nulls if value is None else tuple(value)
        if len(items) != length:
            raise SbeEncodeError(f"{what}: {len(items)} values for an array of {length}")
        try:
            pack(self._buffer, self._offset + offset, *items)
        except struct.error as exc:
            raise struct_error(what, value, exc) from None

    return get, put


def _composite_accessors(index: int, offset: int) -> tuple[Getter, Getter]:
    def get(self: Any) -> Any:
        view = self._composites[index]
        view._buffer = self._buffer
        view._offset = self._offset + offset
        return view

    return get, get


def _fields_reader(
    block: struct.Struct | None, getters: tuple[Getter, ...], newest: int
) -> Callable[[Any], tuple[Any, ...]]:
    if block is not None:
        unpack = block.unpack_from

        def read_fields(self: Any) -> tuple[Any, ...]:
            if self._version >= newest:
                return unpack(self._buffer, self._offset)
            return tuple(get(self) for get in getters)

    else:

        def read_fields(self: Any) -> tuple[Any, ...]:
            return tuple(get(self) for get in getters)

    read_fields.__doc__ = "Every field of the block in schema order (``FIELD_NAMES``), in one call where it can."
    return read_fields


def _fields_writer(block: struct.Struct | None, setters: tuple[Setter, ...], what: str) -> Callable[..., Any]:
    count = len(setters)
    if block is not None:
        pack = block.pack_into

        def write_fields(self: Any, *values: Any) -> Any:
            try:
                pack(self._buffer, self._offset, *values)
            except struct.error as exc:
                raise struct_error(what, values, exc) from None
            return self

    else:

        def write_fields(self: Any, *values: Any) -> Any:
            if len(values) != count:
                raise SbeEncodeError(f"{what}: {len(values)} values for {count} fields")
            for put, value in zip(setters, values, strict=True):
                put(self, value)
            return self

    write_fields.__doc__ = "Set every field of the block in schema order (``FIELD_NAMES``), in one call where it can."
    return write_fields


def _composite_reader(get: Getter) -> Getter:
    def read(self: Any) -> Any:
        return get(self).to_dict()

    return read


def _composite_writer(get: Getter) -> Setter:
    def write(self: Any, value: Any) -> None:
        get(self).encode(value or {})

    return write


def _constant_getter(value: Any) -> Getter:
    def get(self: Any) -> Any:
        return value

    return get


# -- the class builder ---------------------------------------------------------------------------------------------


@dataclass
class _Builder:
    """Builds (and caches, per schema) the classes of one schema."""

    schema: Schema
    header_read: Callable[[Any, int], tuple[int, int, int, int]]
    header_write: Callable[[Any, int, int, int, int, int], None]
    header_length: int
    composites: dict[str, tuple[type[CompositeDecoder], type[CompositeEncoder]]] = field(default_factory=dict)

    def field_accessors(
        self, f: Field, owner: str, composite_index: int
    ) -> tuple[Getter, Setter | None, tuple[type[CompositeDecoder], type[CompositeEncoder]] | None]:
        what = f"{owner}.{f.name}"
        if f.presence == "constant":
            return _constant_getter(f.constant), None, None
        t = f.type
        order = self.schema.byte_order
        since = f.since_version
        if isinstance(t, EncodedType):
            if t.is_text:
                get, put = _text_accessors(what, t.length, _python_encoding(t.character_encoding), f.offset, since)
            elif t.length == 1:
                get, put = _scalar_accessors(what, t.primitive.code, order, f.offset, since, f.null)
            elif t.primitive.name in ("uint8", "int8"):
                get, put = _bytes_accessors(what, t.length, f.offset, since)
            else:
                get, put = _array_accessors(what, t.primitive.code, t.length, order, f.offset, since, t.null)
            return get, put, None
        if isinstance(t, (EnumType, SetType)):
            get, put = _scalar_accessors(what, t.encoding.primitive.code, order, f.offset, since, f.null)
            return get, put, None
        classes = self.composite_classes(t)
        get, _ = _composite_accessors(composite_index, f.offset)
        return get, None, classes

    def composite_classes(self, c: Composite) -> tuple[type[CompositeDecoder], type[CompositeEncoder]]:
        found = self.composites.get(c.name)
        if found is not None:
            return found
        fields = tuple(
            Field(name, 0, t, offset, t.presence if isinstance(t, EncodedType) else "required", 0, None, _const(t))
            for name, t, offset in c.members
        )
        dec_ns: dict[str, Any] = {"__slots__": (), "NAME": c.name, "ENCODED_LENGTH": c.size}
        enc_ns: dict[str, Any] = {"__slots__": (), "NAME": c.name, "ENCODED_LENGTH": c.size}
        inner: list[tuple[type[CompositeDecoder], type[CompositeEncoder]]] = []
        self._fill(fields, c.name, dec_ns, enc_ns, inner)
        dec = type(c.name + "Decoder", (CompositeDecoder,), dec_ns)
        enc = type(c.name + "Encoder", (CompositeEncoder,), enc_ns)
        _attach_composite_init(dec, enc, inner)
        self.composites[c.name] = (dec, enc)
        return dec, enc

    def _fill(
        self,
        fields: Sequence[Field],
        owner: str,
        dec_ns: dict[str, Any],
        enc_ns: dict[str, Any],
        inner: list[tuple[type[CompositeDecoder], type[CompositeEncoder]]],
    ) -> None:
        readers: list[tuple[str, Getter]] = []
        writers: list[tuple[str, Setter, bool]] = []
        constants: list[str] = []
        for f in fields:
            name = _python_name(f.name)
            if name in dec_ns:
                raise SbeSchemaError(f"{owner}: two members are called {name!r}")
            get, put, classes = self.field_accessors(f, owner, len(inner))
            dec_ns[name] = property(get, doc=f"{f.name} (id {f.id}, {f.presence}, since version {f.since_version})")
            if classes is not None:
                inner.append(classes)
                enc_ns[name] = property(get)
                readers.append((name, _composite_reader(get)))
                writers.append((name, _composite_writer(get), False))
            elif put is None:
                enc_ns[name] = property(get)
                readers.append((name, get))
                constants.append(name)
            else:
                enc_ns[name] = property(get, put)
                readers.append((name, get))
                writers.append((name, put, f.presence != "optional" and f.since_version == 0))
        dec_ns["_FIELD_READERS"] = tuple(readers)
        enc_ns["_FIELD_WRITERS"] = tuple(writers)
        enc_ns["_CONSTANT_NAMES"] = tuple(constants)
        names = tuple(name for name, _ in readers if name not in constants)
        dec_ns["FIELD_NAMES"] = enc_ns["FIELD_NAMES"] = names
        block = self.block_struct(fields)
        getters = tuple(get for name, get in readers if name not in constants)
        setters = tuple(put for _, put, _ in writers)
        dec_ns["read_fields"] = _fields_reader(block, getters, max((f.since_version for f in fields), default=0))
        enc_ns["write_fields"] = _fields_writer(block, setters, owner)

    def block_struct(self, fields: Sequence[Field]) -> struct.Struct | None:
        """One Struct over a block whose every field is a single number (int, float, enum or set), else None."""
        fmt = self.schema.byte_order
        position = 0
        for f in fields:
            if f.presence == "constant":
                continue
            t = f.type
            if isinstance(t, EncodedType) and t.length == 1 and not t.is_text:
                code = t.primitive.code
            elif isinstance(t, (EnumType, SetType)):
                code = t.encoding.primitive.code
            else:
                return None
            if f.offset > position:
                fmt += f"{f.offset - position}x"
            fmt += code
            position = f.offset + f.size
        return struct.Struct(fmt)

    def block_classes(
        self,
        owner: str,
        fields: Sequence[Field],
        groups: Sequence[Group],
        data: Sequence[VarData],
        dec_base: type[Any],
        enc_base: type[Any],
        dec_ns: dict[str, Any],
        enc_ns: dict[str, Any],
    ) -> tuple[type[Any], type[Any]]:
        inner: list[tuple[type[CompositeDecoder], type[CompositeEncoder]]] = []
        self._fill(fields, owner, dec_ns, enc_ns, inner)
        group_classes: list[tuple[type[GroupDecoder], type[GroupEncoder]]] = []
        for index, g in enumerate(groups):
            name = _python_name(g.name)
            if name in dec_ns:
                raise SbeSchemaError(f"{owner}: two members are called {name!r}")
            classes = self.group_classes(owner, g)
            group_classes.append(classes)
            dec_ns[name] = _group_reader(self.schema.byte_order, g, index, owner)
            enc_ns[name + "_count"] = _group_writer(self.schema.byte_order, g, index, owner)
        for d in data:
            name = _python_name(d.name)
            if name in dec_ns:
                raise SbeSchemaError(f"{owner}: two members are called {name!r}")
            read, peek, skip, raw = _data_readers(self.schema.byte_order, d, owner)
            dec_ns[name] = read
            dec_ns[name + "_length"] = peek
            dec_ns["skip_" + name] = skip
            dec_ns[name + "_bytes"] = raw
            enc_ns["put_" + name] = _data_writer(self.schema.byte_order, d, owner)
        dec_ns["_GROUP_NAMES"] = enc_ns["_GROUP_NAMES"] = tuple(_python_name(g.name) for g in groups)
        dec_ns["_DATA_NAMES"] = enc_ns["_DATA_NAMES"] = tuple(_python_name(d.name) for d in data)
        dec_ns["__slots__"] = enc_ns["__slots__"] = ()
        dec = type(owner + "Decoder", (dec_base,), dec_ns)
        enc = type(owner + "Encoder", (enc_base,), enc_ns)
        dec_composites = tuple(c[0] for c in inner)
        enc_composites = tuple(c[1] for c in inner)
        dec_groups = tuple(c[0] for c in group_classes)
        enc_groups = tuple(c[1] for c in group_classes)

        def init_dec(self: Any) -> None:
            self._composites = tuple(c() for c in dec_composites)
            self._groups = tuple(g(self._msg) for g in dec_groups)

        def init_enc(self: Any) -> None:
            self._composites = tuple(c() for c in enc_composites)
            self._groups = tuple(g(self._msg) for g in enc_groups)

        if dec_base is MessageDecoder:
            dec._init_children = init_dec  # type: ignore[attr-defined]
            enc._init_children = init_enc  # type: ignore[attr-defined]
        else:
            _attach_group_init(dec, init_dec)
            _attach_group_init(enc, init_enc)
        return dec, enc

    def group_classes(self, owner: str, g: Group) -> tuple[type[GroupDecoder], type[GroupEncoder]]:
        name = owner + g.name[:1].upper() + g.name[1:]
        required = _required_blocks(g.fields, self.schema.version)
        dec_ns: dict[str, Any] = {"NAME": name, "BLOCK_LENGTH": g.block_length, "_REQUIRED_BLOCK": required}
        enc_ns: dict[str, Any] = {"NAME": name, "BLOCK_LENGTH": g.block_length}
        dec, enc = self.block_classes(name, g.fields, g.groups, g.data, GroupDecoder, GroupEncoder, dec_ns, enc_ns)
        return dec, enc

    def message_classes(self, m: Message) -> tuple[type[MessageDecoder], type[MessageEncoder]]:
        common: dict[str, Any] = {
            "NAME": m.name,
            "TEMPLATE_ID": m.id,
            "BLOCK_LENGTH": m.block_length,
            "SCHEMA_ID": self.schema.id,
            "SCHEMA_VERSION": self.schema.version,
            "SINCE_VERSION": m.since_version,
            "HEADER_LENGTH": self.header_length,
        }
        dec_ns = dict(common, _HEADER_READ=staticmethod(self.header_read))
        dec_ns["_REQUIRED_BLOCK"] = _required_blocks(m.fields, self.schema.version)
        enc_ns = dict(common, _HEADER_WRITE=staticmethod(self.header_write))
        header = bytearray(self.header_length)
        self.header_write(header, 0, m.block_length, m.id, self.schema.id, self.schema.version)
        enc_ns["_HEADER_BYTES"] = bytes(header)
        return self.block_classes(m.name, m.fields, m.groups, m.data, MessageDecoder, MessageEncoder, dec_ns, enc_ns)


def _const(t: TypeDef) -> Any:
    if isinstance(t, EncodedType) and t.presence == "constant" and t.constant is not None:
        if t.is_text:
            return t.constant
        try:
            return int(t.constant, 0) if t.primitive.code not in "fd" else float(t.constant)
        except ValueError:
            return t.constant
    return None


def _attach_composite_init(
    dec: type[CompositeDecoder],
    enc: type[CompositeEncoder],
    inner: list[tuple[type[CompositeDecoder], type[CompositeEncoder]]],
) -> None:
    if not inner:
        return
    dec_inner = tuple(c[0] for c in inner)
    enc_inner = tuple(c[1] for c in inner)
    dec_base_init = CompositeDecoder.__init__
    enc_base_init = CompositeEncoder.__init__

    def init_dec(self: Any) -> None:
        dec_base_init(self)
        self._composites = tuple(c() for c in dec_inner)

    def init_enc(self: Any) -> None:
        enc_base_init(self)
        object.__setattr__(self, "_composites", tuple(c() for c in enc_inner))

    dec.__init__ = init_dec  # type: ignore[method-assign]
    enc.__init__ = init_enc  # type: ignore[method-assign]


def _attach_group_init(cls: type[Any], init_children: Callable[[Any], None]) -> None:
    base_init: Callable[[Any, Any], None] = vars(cls.__mro__[1])["__init__"]

    def init(self: Any, msg: Any) -> None:
        base_init(self, msg)
        init_children(self)

    cls.__init__ = init


def _required_blocks(fields: Sequence[Field], version: int) -> tuple[int, ...]:
    """For each acting version 0..version, the block length the fields present at that version need."""
    return tuple(
        max((f.offset + f.size for f in fields if f.since_version <= v and f.size), default=0)
        for v in range(version + 1)
    )


def _member_struct(order: str, composite: Composite, member: str) -> tuple[struct.Struct, int, int]:
    typedef, offset = composite.member(member)
    if not isinstance(typedef, EncodedType) or typedef.length != 1 or typedef.is_text:
        raise SbeSchemaError(f"{composite.name}.{member} must be a single primitive")
    return struct.Struct(order + typedef.primitive.code), offset, int(typedef.primitive.max)


def _group_reader(order: str, g: Group, index: int, owner: str) -> Callable[[Any], GroupDecoder]:
    bl_struct, bl_offset, _ = _member_struct(order, g.dimension, "blockLength")
    n_struct, n_offset, _ = _member_struct(order, g.dimension, "numInGroup")
    read_bl = bl_struct.unpack_from
    read_n = n_struct.unpack_from
    size = g.dimension.size
    since = g.since_version
    block_length = g.block_length
    required = _required_blocks(g.fields, max((f.since_version for f in g.fields), default=0))
    what = f"{owner}.{g.name}"

    def read(self: Any) -> GroupDecoder:
        group = self._groups[index]
        msg = self._msg
        version = self._version
        if version < since:
            group._count = 0
            group._index = 0
            return group  # type: ignore[no-any-return]
        pos = msg._limit
        buffer = msg._buffer
        end = pos + size
        if end > msg._capacity:
            raise SbeDecodeError(f"{what}: group header at {pos} exceeds the buffer of {msg._capacity}")
        entry_length = read_bl(buffer, pos + bl_offset)[0]
        count = read_n(buffer, pos + n_offset)[0]
        if count < 0 or end + count * entry_length > msg._capacity:
            raise SbeDecodeError(f"{what}: {count} entries of {entry_length} bytes exceed the buffer")
        if entry_length < block_length:
            MessageDecoder._check_block(entry_length, version, required, what)
        msg._limit = end
        group._buffer = buffer
        group._version = version
        group._entry_length = entry_length
        group._count = count
        group._index = 0
        return group  # type: ignore[no-any-return]

    read.__doc__ = f"The {g.name} group (id {g.id}), read from the message's limit; iterate it for its entries."
    return read


def _group_writer(order: str, g: Group, index: int, owner: str) -> Callable[[Any, int], GroupEncoder]:
    bl_struct, bl_offset, _ = _member_struct(order, g.dimension, "blockLength")
    n_struct, n_offset, n_max = _member_struct(order, g.dimension, "numInGroup")
    pack_bl = bl_struct.pack_into
    pack_n = n_struct.pack_into
    size = g.dimension.size
    block_length = g.block_length
    what = f"{owner}.{g.name}"

    def write(self: Any, count: int) -> GroupEncoder:
        if not 0 <= count <= n_max:
            raise SbeEncodeError(f"{what}: {count} entries, at most {n_max}")
        msg = self._msg
        pos = msg._limit
        end = pos + size
        if end + count * block_length > msg._capacity:
            raise SbeEncodeError(f"{what}: {count} entries at {pos} exceed the buffer of {msg._capacity}")
        buffer = msg._buffer
        buffer[pos:end] = bytes(size)
        pack_bl(buffer, pos + bl_offset, block_length)
        pack_n(buffer, pos + n_offset, count)
        msg._limit = end
        group = self._groups[index]
        group._buffer = buffer
        group._count = count
        group._index = 0
        return group  # type: ignore[no-any-return]

    write.__doc__ = f"Start the {g.name} group (id {g.id}) with ``count`` entries; then ``next()`` before each."
    return write


def _data_readers(order: str, d: VarData, owner: str) -> tuple[Getter, Getter, Getter, Getter]:
    length_struct = struct.Struct(order + d.length_type.primitive.code)
    read_length = length_struct.unpack_from
    header = length_struct.size
    since = d.since_version
    encoding = _python_encoding(d.character_encoding) if d.character_encoding else None
    what = f"{owner}.{d.name}"

    def span(self: Any) -> tuple[Any, int, int]:
        msg = self._msg
        pos = msg._limit
        start = pos + header
        if start > msg._capacity:
            raise SbeDecodeError(f"{what}: length at {pos} exceeds the buffer of {msg._capacity}")
        end = start + read_length(msg._buffer, pos)[0]
        if end > msg._capacity or end < start:
            raise SbeDecodeError(f"{what}: {end - start} bytes at {start} exceed the buffer of {msg._capacity}")
        msg._limit = end
        return msg._buffer, start, end

    if encoding is not None and since == 0:

        def read(self: Any) -> Any:
            msg = self._msg
            pos = msg._limit
            buffer = msg._buffer
            start = pos + header
            try:
                end = start + read_length(buffer, pos)[0]
            except struct.error:
                raise SbeDecodeError(f"{what}: length at {pos} exceeds the buffer of {msg._capacity}") from None
            if end > msg._capacity or end < start:
                raise SbeDecodeError(f"{what}: {end - start} bytes at {start} exceed the buffer of {msg._capacity}")
            msg._limit = end
            return str(buffer[start:end], encoding, "replace")

    elif encoding is not None:

        def read(self: Any) -> Any:
            if self._version < since:
                return ""
            buffer, start, end = span(self)
            return str(buffer[start:end], encoding, "replace")

    else:

        def read(self: Any) -> Any:
            if self._version < since:
                return b""
            buffer, start, end = span(self)
            return bytes(buffer[start:end])

    def raw(self: Any) -> Any:
        if self._version < since:
            return b""
        buffer, start, end = span(self)
        return bytes(buffer[start:end])

    def peek(self: Any) -> int:
        if self._version < since:
            return 0
        msg = self._msg
        if msg._limit + header > msg._capacity:
            raise SbeDecodeError(f"{what}: length at {msg._limit} exceeds the buffer of {msg._capacity}")
        return int(read_length(msg._buffer, msg._limit)[0])

    def skip(self: Any) -> int:
        if self._version < since:
            return 0
        _, start, end = span(self)
        return end - start

    kind = "str" if encoding else "bytes"
    read.__doc__ = f"{d.name} (id {d.id}) as {kind}; advances the message's limit past it."
    peek.__doc__ = f"The length of {d.name} in bytes, without moving on."
    skip.__doc__ = f"Move past {d.name}; returns its length."
    raw.__doc__ = f"{d.name} as bytes, whatever its encoding; advances the limit."
    return read, peek, skip, raw


def _data_writer(order: str, d: VarData, owner: str) -> Callable[[Any, Any], Any]:
    length_struct = struct.Struct(order + d.length_type.primitive.code)
    pack_length = length_struct.pack_into
    header = length_struct.size
    encoding = _python_encoding(d.character_encoding) if d.character_encoding else "utf-8"
    max_length = d.max_length
    what = f"{owner}.{d.name}"

    def put(self: Any, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = value.encode(encoding)
            except UnicodeError as exc:
                raise struct_error(what, value, exc) from None
        elif value is None:
            value = b""
        length = value.nbytes if isinstance(value, memoryview) else len(value)
        if length > max_length:
            raise SbeEncodeError(f"{what}: {length} bytes, at most {max_length}")
        msg = self._msg
        pos = msg._limit
        start = pos + header
        end = start + length
        if end > msg._capacity:
            raise SbeEncodeError(f"{what}: {length} bytes at {start} exceed the buffer of {msg._capacity}")
        buffer = msg._buffer
        pack_length(buffer, pos, length)
        buffer[start:end] = value
        msg._limit = end
        return self

    put.__doc__ = f"Write {d.name} (id {d.id}) from str or bytes at the message's limit and move past it."
    return put


# -- the compiled schema -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageCodec:
    """One message of a schema: its metadata and its decoder and encoder classes."""

    name: str
    template_id: int
    block_length: int
    since_version: int
    message: Message = field(repr=False)
    decoder_class: type[MessageDecoder]
    encoder_class: type[MessageEncoder]
    schema_id: int
    schema_version: int
    header_length: int
    nulls: Mapping[str, Any] = field(repr=False)
    """Python field name -> the value it reads as when null or absent."""

    def decoder(self) -> MessageDecoder:
        """A new decoder (make one per user and reuse it: ``wrap`` it for each message)."""
        return self.decoder_class()

    def encoder(self) -> MessageEncoder:
        return self.encoder_class()

    def null_value(self, name: str) -> Any:
        """The null value of a field, by Python or schema name."""
        return self.nulls[name] if name in self.nulls else self.nulls[_python_name(name)]

    def encoded_size(self, values: Mapping[str, Any]) -> int:
        """Bytes :meth:`encode` will need for ``values``, header included."""
        return self.header_length + _size(self.message.block_length, self.message, values)

    def encode(self, values: Mapping[str, Any], *, header: bool = True) -> bytes:
        """The message with ``values`` (by Python name; groups as sequences of mappings) as bytes. Slow path."""
        size = _size(self.message.block_length, self.message, values)
        buffer = bytearray(size + (self.header_length if header else 0))
        encoder = self.encoder_class()
        if header:
            encoder.wrap_and_apply_header(buffer, 0)
        else:
            encoder.wrap(buffer, 0)
        encoder.encode(values)
        return bytes(buffer)

    def decode(self, buffer: Buffer, offset: int = 0, *, header: bool = True) -> dict[str, Any]:
        """Every value of the message at ``offset`` as a dict (after checking its header, unless told not to)."""
        decoder = self.decoder_class()
        if header:
            decoder.wrap_and_check_header(buffer, offset)
        else:
            decoder.wrap(buffer, offset, self.block_length, self.schema_version)
        return decoder.to_dict()


def _size(block_length: int, block: Message | Group, values: Mapping[str, Any]) -> int:
    size = block_length
    for g in block.groups:
        entries = values.get(_python_name(g.name), ())
        size += g.dimension.size + sum(_size(g.block_length, g, entry) for entry in entries)
    for d in block.data:
        value = values.get(_python_name(d.name), b"")
        encoding = _python_encoding(d.character_encoding) if d.character_encoding else "utf-8"
        raw = value.encode(encoding, "replace") if isinstance(value, str) else value
        size += struct.calcsize(d.length_type.primitive.code) + (
            raw.nbytes if isinstance(raw, memoryview) else len(raw)
        )
    return size


class Dispatcher:
    """Reads a message header and wraps the right decoder: one reused decoder per template id.

    Make one per receiving loop (decoders are not shared). :meth:`wrap` raises :class:`SbeSchemaIdMismatchError`
    for another schema's message and :class:`SbeUnknownTemplateError` for a template this schema lacks (a newer
    peer's message), both :class:`SbeDecodeError`: count and drop.
    """

    __slots__ = ("_decoders", "_header_length", "_read", "_schema_id")

    def __init__(self, schema: MessageSchema) -> None:
        self._decoders = {tid: codec.decoder() for tid, codec in schema.templates.items()}
        self._read = schema._header_read
        self._schema_id = schema.id
        self._header_length = schema.header_length

    def wrap(self, buffer: Buffer, offset: int = 0, length: int | None = None) -> MessageDecoder:
        """The decoder of the message at ``offset`` (``length``, when given, bounds it, header included)."""
        try:
            capacity = len(buffer)
        except TypeError:
            buffer = as_buffer(buffer)
            capacity = len(buffer)
        if length is not None and offset + length < capacity:
            capacity = offset + length
        if offset < 0 or offset + self._header_length > capacity:
            raise SbeDecodeError(f"no room for a message header at offset {offset} of {capacity} bytes")
        block_length, template_id, schema_id, version = self._read(buffer, offset)
        if schema_id != self._schema_id:
            raise SbeSchemaIdMismatchError(self._schema_id, schema_id, template_id)
        decoder = self._decoder_for(template_id, version)
        if decoder is None:
            raise SbeUnknownTemplateError(template_id, schema_id, version)
        body = offset + self._header_length
        return decoder.wrap(buffer, body, block_length, version, capacity - body)

    def _decoder_for(self, template_id: int, version: int) -> MessageDecoder | None:
        """The decoder for a message of this template sent at ``version`` (a subclass may pick among schemas)."""
        return self._decoders.get(template_id)


class MessageSchema:
    """A schema compiled into flyweight classes: messages by name and template id, enums, sets, the header."""

    def __init__(self, schema: Schema) -> None:
        self.ir = schema
        self.id = schema.id
        self.version = schema.version
        self.package = schema.package
        self.semantic_version = schema.semantic_version
        self.byte_order = schema.byte_order
        read, write, length = _header_codec(schema)
        self._header_read = read
        self._header_write = write
        self.header_length = length
        builder = _Builder(schema, read, write, length)
        self.enums: dict[str, type[enum.IntEnum]] = {}
        self.sets: dict[str, type[enum.IntFlag]] = {}
        for name, typedef in schema.types.items():
            if isinstance(typedef, EnumType):
                self.enums[name] = enum.IntEnum(name, typedef.values)  # type: ignore[assignment]
            elif isinstance(typedef, SetType):
                choices = {k: 1 << v for k, v in typedef.choices.items()}
                self.sets[name] = enum.IntFlag(name, choices)  # type: ignore[assignment]
        self.messages: dict[str, MessageCodec] = {}
        self.templates: dict[int, MessageCodec] = {}
        for message in schema.messages:
            dec, enc = builder.message_classes(message)
            codec = MessageCodec(
                name=message.name,
                template_id=message.id,
                block_length=message.block_length,
                since_version=message.since_version,
                message=message,
                decoder_class=dec,
                encoder_class=enc,
                schema_id=schema.id,
                schema_version=schema.version,
                header_length=length,
                nulls={_python_name(f.name): f.null for f in message.fields},
            )
            self.messages[message.name] = codec
            self.templates[message.id] = codec

    def __getitem__(self, name: str) -> MessageCodec:
        return self.messages[name]

    def __contains__(self, name: object) -> bool:
        return name in self.messages

    def __repr__(self) -> str:
        return f"<MessageSchema {self.package} id={self.id} version={self.version} messages={len(self.messages)}>"

    def read_header(self, buffer: Buffer, offset: int = 0) -> MessageHeader:
        buffer = as_buffer(buffer)
        capacity = buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
        if offset < 0 or offset + self.header_length > capacity:
            raise SbeDecodeError(f"no room for a message header at offset {offset} of {capacity} bytes")
        return MessageHeader(*self._header_read(buffer, offset))

    def write_header(
        self,
        buffer: WritableBuffer,
        offset: int,
        block_length: int,
        template_id: int,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> None:
        try:
            self._header_write(
                buffer,
                offset,
                block_length,
                template_id,
                self.id if schema_id is None else schema_id,
                self.version if version is None else version,
            )
        except struct.error as exc:
            raise struct_error("messageHeader", (block_length, template_id), exc) from None

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(self)

    def decode(self, buffer: Buffer, offset: int = 0) -> tuple[MessageCodec, dict[str, Any]]:
        """The message at ``offset``, whichever it is, as (its codec, its values). Slow path."""
        header = self.read_header(buffer, offset)
        if header.schema_id != self.id:
            raise SbeSchemaIdMismatchError(self.id, header.schema_id, header.template_id)
        codec = self.templates.get(header.template_id)
        if codec is None:
            raise SbeUnknownTemplateError(header.template_id, header.schema_id, header.version)
        return codec, codec.decode(buffer, offset)


def _header_codec(
    schema: Schema,
) -> tuple[Callable[[Any, int], tuple[int, int, int, int]], Callable[[Any, int, int, int, int, int], None], int]:
    header = schema.header
    members = sorted(header.members, key=lambda m: m[2])
    fmt = schema.byte_order
    names: list[str] = []
    position = 0
    for name, typedef, offset in members:
        if not isinstance(typedef, EncodedType) or typedef.length != 1 or typedef.is_text:
            raise SbeSchemaError(f"header member {name!r} must be a single primitive")
        if offset > position:
            fmt += f"{offset - position}x"
        fmt += typedef.primitive.code
        names.append(name)
        position = offset + typedef.size
    if header.size > position:
        fmt += f"{header.size - position}x"
    s = struct.Struct(fmt)
    order = [names.index(k) for k in ("blockLength", "templateId", "schemaId", "version")]
    if order == [0, 1, 2, 3] and len(names) == 4:
        return s.unpack_from, s.pack_into, s.size
    unpack = s.unpack_from
    pack = s.pack_into
    count = len(names)

    def read(buffer: Any, offset: int) -> tuple[int, int, int, int]:
        values = unpack(buffer, offset)
        return values[order[0]], values[order[1]], values[order[2]], values[order[3]]

    def write(buffer: Any, offset: int, bl: int, tid: int, sid: int, version: int) -> None:
        values = [0] * count
        for index, value in zip(order, (bl, tid, sid, version), strict=True):
            values[index] = value
        pack(buffer, offset, *values)

    return read, write, s.size


@functools.lru_cache(maxsize=64)
def load_schema(xml: str | bytes) -> MessageSchema:
    """Compile a schema from its XML text; the same text gives the same (cached) :class:`MessageSchema`."""
    return MessageSchema(parse_schema(xml))


@functools.lru_cache(maxsize=64)
def load_schema_resource(package: str, resource: str) -> MessageSchema:
    """Compile a schema shipped as package data: ``resource`` is a ``/``-separated path inside ``package``."""
    path = importlib.resources.files(package)
    for part in resource.split("/"):
        path = path.joinpath(part)
    try:
        xml = path.read_bytes()
    except OSError as exc:
        raise SbeSchemaError(f"cannot read schema {resource!r} of {package}: {exc}") from None
    return load_schema(xml)
