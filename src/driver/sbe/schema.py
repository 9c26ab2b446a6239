"""An SBE 1.0 message schema, read from its XML into plain frozen records.

Reading and laying out happen here once; :mod:`driver.sbe.codec` turns the records into flyweight classes. The
layout follows the SBE 1.0 specification: a field sits at its ``offset`` attribute or right after the previous one
(no implicit padding), a ``constant`` field takes no space, a block is as long as its ``blockLength`` attribute or
its fields, whichever is longer, and repeating groups then variable-length data follow the block in schema order.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Literal

from driver.sbe.errors import SbeSchemaError

__all__ = [
    "PRIMITIVES",
    "Composite",
    "EncodedType",
    "EnumType",
    "Field",
    "Group",
    "Message",
    "Primitive",
    "Schema",
    "SetType",
    "TypeDef",
    "VarData",
    "parse_schema",
    "snake_case",
]

Presence = Literal["required", "optional", "constant"]


@dataclass(frozen=True)
class Primitive:
    name: str
    code: str
    """The :mod:`struct` format character."""
    size: int
    null: int | float
    min: int | float
    max: int | float


PRIMITIVES: dict[str, Primitive] = {
    p.name: p
    for p in (
        Primitive("char", "B", 1, 0, 0x20, 0x7E),
        Primitive("int8", "b", 1, -(2**7), -(2**7) + 1, 2**7 - 1),
        Primitive("uint8", "B", 1, 2**8 - 1, 0, 2**8 - 2),
        Primitive("int16", "h", 2, -(2**15), -(2**15) + 1, 2**15 - 1),
        Primitive("uint16", "H", 2, 2**16 - 1, 0, 2**16 - 2),
        Primitive("int32", "i", 4, -(2**31), -(2**31) + 1, 2**31 - 1),
        Primitive("uint32", "I", 4, 2**32 - 1, 0, 2**32 - 2),
        Primitive("int64", "q", 8, -(2**63), -(2**63) + 1, 2**63 - 1),
        Primitive("uint64", "Q", 8, 2**64 - 1, 0, 2**64 - 2),
        Primitive("float", "f", 4, math.nan, -3.4028234663852886e38, 3.4028234663852886e38),
        Primitive("double", "d", 8, math.nan, -1.7976931348623157e308, 1.7976931348623157e308),
    )
}
"""SBE 1.0 primitive types with their default null, min and max values."""


@dataclass(frozen=True)
class EncodedType:
    """A ``<type>``: a primitive, a fixed array of one (``length``), optional or constant."""

    name: str
    primitive: Primitive
    length: int = 1
    presence: Presence = "required"
    null: int | float | str = 0
    min: int | float = 0
    max: int | float = 0
    character_encoding: str | None = None
    constant: str | None = None
    since_version: int = 0
    offset: int | None = None

    @property
    def size(self) -> int:
        return 0 if self.presence == "constant" else self.primitive.size * self.length

    @property
    def is_text(self) -> bool:
        """A char array (or a byte array naming an encoding): read and written as a string."""
        return self.primitive.name == "char" or (self.character_encoding is not None and self.length != 1)


@dataclass(frozen=True)
class EnumType:
    name: str
    encoding: EncodedType
    values: dict[str, int]
    since: dict[str, int]
    since_version: int = 0
    offset: int | None = None

    @property
    def size(self) -> int:
        return self.encoding.primitive.size

    @property
    def null(self) -> int:
        return int(self.encoding.null)


@dataclass(frozen=True)
class SetType:
    name: str
    encoding: EncodedType
    choices: dict[str, int]
    """Choice name -> bit position."""
    since_version: int = 0
    offset: int | None = None

    @property
    def size(self) -> int:
        return self.encoding.primitive.size


@dataclass(frozen=True)
class Composite:
    name: str
    members: tuple[tuple[str, TypeDef, int], ...]
    """(name, type, offset within the composite) in schema order."""
    size: int
    since_version: int = 0
    offset: int | None = None

    def member(self, name: str) -> tuple[TypeDef, int]:
        for member_name, typedef, offset in self.members:
            if member_name == name:
                return typedef, offset
        raise SbeSchemaError(f"composite {self.name!r} has no member {name!r}")


TypeDef = EncodedType | EnumType | SetType | Composite


@dataclass(frozen=True)
class Field:
    name: str
    id: int
    type: TypeDef
    offset: int
    presence: Presence
    since_version: int
    deprecated: int | None
    constant: int | float | str | None
    """The value of a constant field (an enum constant as its number)."""

    @property
    def size(self) -> int:
        return 0 if self.presence == "constant" else self.type.size

    @property
    def null(self) -> int | float | str | bytes | None:
        """What the field reads as when it is absent (an older acting version) or null (optional)."""
        t = self.type
        if isinstance(t, EncodedType):
            if t.is_text:
                return ""
            if t.length != 1 and t.primitive.name in ("uint8", "int8"):
                return b""
            return t.null
        if isinstance(t, EnumType):
            return t.null
        if isinstance(t, SetType):
            return 0
        return None


@dataclass(frozen=True)
class VarData:
    name: str
    id: int
    length_type: EncodedType
    """The length prefix."""
    character_encoding: str | None
    since_version: int
    deprecated: int | None
    max_length: int


@dataclass(frozen=True)
class Group:
    name: str
    id: int
    block_length: int
    dimension: Composite
    fields: tuple[Field, ...]
    groups: tuple[Group, ...]
    data: tuple[VarData, ...]
    since_version: int
    deprecated: int | None


@dataclass(frozen=True)
class Message:
    name: str
    id: int
    block_length: int
    fields: tuple[Field, ...]
    groups: tuple[Group, ...]
    data: tuple[VarData, ...]
    since_version: int
    deprecated: int | None
    description: str = ""


@dataclass(frozen=True)
class Schema:
    id: int
    version: int
    package: str
    byte_order: str
    """``<`` or ``>``, as :mod:`struct` spells it."""
    header: Composite
    types: dict[str, TypeDef]
    messages: tuple[Message, ...]
    semantic_version: str = ""
    description: str = ""
    by_name: dict[str, Message] = field(default_factory=dict)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """``replayStreamId`` -> ``replay_stream_id``; the Python name of a field, group or var data."""
    return _CAMEL.sub("_", name).lower()


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _int_attr(el: ET.Element, name: str, default: int | None = None) -> int | None:
    raw = el.get(name)
    if raw is None:
        return default
    try:
        return int(raw.strip(), 0)
    except ValueError:
        raise SbeSchemaError(f"<{_local(el.tag)} name={el.get('name')!r}>: {name}={raw!r} is not an integer") from None


def _number(text: str, primitive: Primitive) -> int | float:
    text = text.strip()
    if primitive.name in ("float", "double"):
        return float(text)
    if primitive.name == "char" and len(text) == 1 and not text.isdigit():
        return ord(text)
    return int(text, 0)


class _Parser:
    def __init__(self, root: ET.Element) -> None:
        self.root = root
        self.order = "<" if root.get("byteOrder", "littleEndian") == "littleEndian" else ">"
        self.raw: dict[str, ET.Element] = {}
        self.types: dict[str, TypeDef] = {}
        self.resolving: set[str] = set()

    def parse(self) -> Schema:
        root = self.root
        if _local(root.tag) != "messageSchema":
            raise SbeSchemaError(f"the root element is <{_local(root.tag)}>, not <messageSchema>")
        if root.get("byteOrder", "littleEndian") not in ("littleEndian", "bigEndian"):
            raise SbeSchemaError(f"byteOrder={root.get('byteOrder')!r} is neither littleEndian nor bigEndian")
        for types in root:
            if _local(types.tag) != "types":
                continue
            for el in types:
                name = el.get("name")
                if name is None or _local(el.tag) not in ("type", "composite", "enum", "set"):
                    continue
                if name in self.raw:
                    raise SbeSchemaError(f"type {name!r} is defined twice")
                self.raw[name] = el
        for name in self.raw:
            self.resolve(name)
        header_name = root.get("headerType", "messageHeader")
        header = self.types.get(header_name)
        if not isinstance(header, Composite):
            raise SbeSchemaError(f"the header type {header_name!r} is not a composite of the schema")
        for member in ("blockLength", "templateId", "schemaId", "version"):
            header.member(member)
        messages = tuple(self.message(el) for el in root if _local(el.tag) == "message")
        by_name: dict[str, Message] = {}
        ids: set[int] = set()
        for message in messages:
            if message.name in by_name or message.id in ids:
                raise SbeSchemaError(f"message {message.name!r} (id {message.id}) is defined twice")
            by_name[message.name] = message
            ids.add(message.id)
        return Schema(
            id=_int_attr(root, "id", 0) or 0,
            version=_int_attr(root, "version", 0) or 0,
            package=root.get("package", ""),
            byte_order=self.order,
            header=header,
            types=dict(self.types),
            messages=messages,
            semantic_version=root.get("semanticVersion", ""),
            description=root.get("description", ""),
            by_name=by_name,
        )

    # -- types ---------------------------------------------------------------------------------------------------

    def resolve(self, name: str) -> TypeDef:
        found = self.types.get(name)
        if found is not None:
            return found
        if name in PRIMITIVES:
            prim = PRIMITIVES[name]
            encoding = "US-ASCII" if name == "char" else None
            return EncodedType(name, prim, null=prim.null, min=prim.min, max=prim.max, character_encoding=encoding)
        el = self.raw.get(name)
        if el is None:
            raise SbeSchemaError(f"unknown type {name!r}")
        if name in self.resolving:
            raise SbeSchemaError(f"type {name!r} refers to itself")
        self.resolving.add(name)
        try:
            typedef = self.typedef(el)
        finally:
            self.resolving.discard(name)
        self.types[name] = typedef
        return typedef

    def typedef(self, el: ET.Element) -> TypeDef:
        kind = _local(el.tag)
        if kind == "type":
            return self.encoded(el)
        if kind == "composite":
            return self.composite(el)
        if kind == "enum":
            return self.enum(el)
        if kind == "set":
            return self.set(el)
        if kind == "ref":
            target = el.get("type")
            if target is None:
                raise SbeSchemaError(f"<ref name={el.get('name')!r}> names no type")
            return self.resolve(target)
        raise SbeSchemaError(f"unsupported element <{kind}>")

    def encoded(self, el: ET.Element) -> EncodedType:
        name = el.get("name", "")
        prim_name = el.get("primitiveType")
        if prim_name not in PRIMITIVES:
            raise SbeSchemaError(f"type {name!r}: primitiveType={prim_name!r} is not an SBE primitive")
        prim = PRIMITIVES[prim_name]
        presence = el.get("presence", "required")
        if presence not in ("required", "optional", "constant"):
            raise SbeSchemaError(f"type {name!r}: presence={presence!r}")
        length = _int_attr(el, "length", 1)
        assert length is not None
        if length < 0:
            raise SbeSchemaError(f"type {name!r}: negative length")
        encoding = el.get("characterEncoding")
        if prim.name == "char" and encoding is None:
            encoding = "US-ASCII"
        null: int | float | str = prim.null
        if el.get("nullValue") is not None:
            null = _number(el.get("nullValue", ""), prim)
        constant = (el.text or "").strip() if presence == "constant" else None
        if presence == "constant" and not constant and el.get("valueRef") is None:
            raise SbeSchemaError(f"constant type {name!r} has no value")
        return EncodedType(
            name=name,
            primitive=prim,
            length=length,
            presence=presence,  # type: ignore[arg-type]
            null=null,
            min=_number(el.get("minValue", ""), prim) if el.get("minValue") else prim.min,
            max=_number(el.get("maxValue", ""), prim) if el.get("maxValue") else prim.max,
            character_encoding=encoding,
            constant=constant if constant or el.get("valueRef") is None else el.get("valueRef"),
            since_version=_int_attr(el, "sinceVersion", 0) or 0,
            offset=_int_attr(el, "offset"),
        )

    def encoding_of(self, el: ET.Element) -> EncodedType:
        enc = el.get("encodingType")
        if enc is None:
            raise SbeSchemaError(f"<{_local(el.tag)} name={el.get('name')!r}> has no encodingType")
        typedef = self.resolve(enc)
        if not isinstance(typedef, EncodedType) or typedef.length != 1:
            raise SbeSchemaError(f"{el.get('name')!r}: encodingType {enc!r} is not a single primitive")
        return typedef

    def enum(self, el: ET.Element) -> EnumType:
        encoding = self.encoding_of(el)
        values: dict[str, int] = {}
        since: dict[str, int] = {}
        for child in el:
            if _local(child.tag) != "validValue":
                continue
            value = _number(child.text or "", encoding.primitive)
            values[child.get("name", "")] = int(value)
            since[child.get("name", "")] = _int_attr(child, "sinceVersion", 0) or 0
        return EnumType(
            el.get("name", ""),
            encoding,
            values,
            since,
            since_version=_int_attr(el, "sinceVersion", 0) or 0,
            offset=_int_attr(el, "offset"),
        )

    def set(self, el: ET.Element) -> SetType:
        encoding = self.encoding_of(el)
        choices = {
            child.get("name", ""): int((child.text or "").strip()) for child in el if _local(child.tag) == "choice"
        }
        bits = encoding.primitive.size * 8
        for choice, bit in choices.items():
            if not 0 <= bit < bits:
                raise SbeSchemaError(f"set {el.get('name')!r}: choice {choice!r} bit {bit} outside {bits} bits")
        return SetType(
            el.get("name", ""),
            encoding,
            choices,
            since_version=_int_attr(el, "sinceVersion", 0) or 0,
            offset=_int_attr(el, "offset"),
        )

    def composite(self, el: ET.Element) -> Composite:
        members: list[tuple[str, TypeDef, int]] = []
        position = 0
        for child in el:
            if _local(child.tag) not in ("type", "composite", "enum", "set", "ref"):
                continue
            typedef = self.typedef(child)
            offset = _int_attr(child, "offset")
            if offset is None:
                offset = position
            elif offset < position:
                raise SbeSchemaError(f"composite {el.get('name')!r}: member {child.get('name')!r} overlaps")
            members.append((child.get("name", ""), typedef, offset))
            position = offset + typedef.size
        return Composite(
            el.get("name", ""),
            tuple(members),
            position,
            since_version=_int_attr(el, "sinceVersion", 0) or 0,
            offset=_int_attr(el, "offset"),
        )

    # -- messages ------------------------------------------------------------------------------------------------

    def constant_value(self, typedef: TypeDef, value_ref: str | None, where: str) -> int | float | str:
        if value_ref is not None:
            enum_name, _, value_name = value_ref.partition(".")
            enum = self.types.get(enum_name)
            if not isinstance(enum, EnumType) or value_name not in enum.values:
                raise SbeSchemaError(f"{where}: valueRef {value_ref!r} names no enum value")
            return enum.values[value_name]
        if isinstance(typedef, EncodedType) and typedef.constant is not None:
            if "." in typedef.constant and typedef.primitive.name != "char":
                return self.constant_value(typedef, typedef.constant, where)
            if typedef.is_text:
                return typedef.constant
            return _number(typedef.constant, typedef.primitive)
        raise SbeSchemaError(f"{where}: a constant field needs a constant type or a valueRef")

    def block(
        self, el: ET.Element, where: str
    ) -> tuple[tuple[Field, ...], tuple[Group, ...], tuple[VarData, ...], int]:
        fields: list[Field] = []
        groups: list[Group] = []
        data: list[VarData] = []
        position = 0
        for child in el:
            kind = _local(child.tag)
            name = child.get("name", "")
            here = f"{where}.{name}"
            if kind == "field":
                if groups or data:
                    raise SbeSchemaError(f"{here}: fields must come before groups and data")
                typedef = self.resolve(child.get("type", ""))
                presence = child.get("presence")
                if presence is None:
                    presence = typedef.presence if isinstance(typedef, EncodedType) else "required"
                if presence not in ("required", "optional", "constant"):
                    raise SbeSchemaError(f"{here}: presence={presence!r}")
                constant = self.constant_value(typedef, child.get("valueRef"), here) if presence == "constant" else None
                offset = _int_attr(child, "offset")
                if offset is None:
                    offset = position
                elif offset < position:
                    raise SbeSchemaError(f"{here}: offset {offset} overlaps the previous field")
                f = Field(
                    name=name,
                    id=_int_attr(child, "id", 0) or 0,
                    type=typedef,
                    offset=offset,
                    presence=presence,  # type: ignore[arg-type]
                    since_version=_int_attr(child, "sinceVersion", 0) or 0,
                    deprecated=_int_attr(child, "deprecated"),
                    constant=constant,
                )
                fields.append(f)
                position = offset + f.size
            elif kind == "group":
                if data:
                    raise SbeSchemaError(f"{here}: groups must come before data")
                groups.append(self.group(child, here))
            elif kind == "data":
                typedef = self.resolve(child.get("type", ""))
                if not isinstance(typedef, Composite):
                    raise SbeSchemaError(f"{here}: data type {child.get('type')!r} is not a composite")
                length_type, _ = typedef.member("length")
                var_type, _ = typedef.member("varData")
                if not isinstance(length_type, EncodedType) or not isinstance(var_type, EncodedType):
                    raise SbeSchemaError(f"{here}: {typedef.name} needs primitive length and varData members")
                if length_type.primitive.name not in ("uint8", "uint16", "uint32", "int8", "int16", "int32"):
                    raise SbeSchemaError(f"{here}: unsupported length type {length_type.primitive.name}")
                encoding = var_type.character_encoding
                data.append(
                    VarData(
                        name=name,
                        id=_int_attr(child, "id", 0) or 0,
                        length_type=length_type,
                        character_encoding=encoding,
                        since_version=_int_attr(child, "sinceVersion", 0) or 0,
                        deprecated=_int_attr(child, "deprecated"),
                        max_length=int(min(length_type.max, length_type.primitive.max)),
                    )
                )
        declared = _int_attr(el, "blockLength", 0) or 0
        return tuple(fields), tuple(groups), tuple(data), max(declared, position)

    def group(self, el: ET.Element, where: str) -> Group:
        dimension = self.resolve(el.get("dimensionType", "groupSizeEncoding"))
        if not isinstance(dimension, Composite):
            raise SbeSchemaError(f"{where}: dimensionType is not a composite")
        dimension.member("blockLength")
        dimension.member("numInGroup")
        fields, groups, data, block_length = self.block(el, where)
        return Group(
            name=el.get("name", ""),
            id=_int_attr(el, "id", 0) or 0,
            block_length=block_length,
            dimension=dimension,
            fields=fields,
            groups=groups,
            data=data,
            since_version=_int_attr(el, "sinceVersion", 0) or 0,
            deprecated=_int_attr(el, "deprecated"),
        )

    def message(self, el: ET.Element) -> Message:
        name = el.get("name", "")
        fields, groups, data, block_length = self.block(el, name)
        return Message(
            name=name,
            id=_int_attr(el, "id", 0) or 0,
            block_length=block_length,
            fields=fields,
            groups=groups,
            data=data,
            since_version=_int_attr(el, "sinceVersion", 0) or 0,
            deprecated=_int_attr(el, "deprecated"),
            description=el.get("description", ""),
        )


def parse_schema(xml: str | bytes) -> Schema:
    """Read a schema from its XML text; :class:`SbeSchemaError` when it is not one this codec can handle."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise SbeSchemaError(f"the schema is not well-formed XML: {exc}") from None
    return _Parser(root).parse()
