"""What each registered class looks like on the wire, and whether two versions of it can talk.

A registered object travels as a map keyed by field name (see :mod:`endpoint.serialization`), so a reader
ignores fields it does not know and fills the ones that did not come from their defaults. Two end points whose
classes differ can therefore still talk, as long as every difference is one of those. The rules, for each type id
registered on both sides (the classes are matched by id; their names may differ):

- a field on both sides must have the same type (its annotation, written out as text: ``int``,
  ``list[str]``, ``float | None``, a registered class by its type id ``#12``);
- a field on one side only must have a default on that side (the other side never sends it, so the reader
  fills it in); a field on one side only without a default is incompatible;
- a type id registered on one side only is no obstacle (the other side drops its messages, counting them).

:func:`incompatibility` applies them to two lists of :class:`ClassSchema` (ours, the peer's) and names the first
class and field that breaks them; :func:`pack` and :func:`unpack` carry a list through the handshake, bounded
(a peer's schema is untrusted input). Nothing here does I/O.
"""

from __future__ import annotations

import enum
import typing
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs
import msgpack  # type: ignore[import-untyped]

from endpoint.errors import SerializationError

__all__ = [
    "MAX_CLASSES",
    "MAX_FIELDS",
    "MAX_PACKED_LENGTH",
    "MAX_TEXT_LENGTH",
    "ClassSchema",
    "CompatibilityCheck",
    "FieldSchema",
    "Incompatibility",
    "describe",
    "incompatibility",
    "pack",
    "type_text",
    "unpack",
]

MAX_CLASSES: Final = 0x8000
"""Most classes an unpacked schema may list (every type id there is)."""
MAX_FIELDS: Final = 1024
"""Most fields one class of an unpacked schema may have."""
MAX_TEXT_LENGTH: Final = 512
"""Longest class name, field name or type text an unpacked schema may hold."""
MAX_PACKED_LENGTH: Final = 1 << 20
"""Most bytes a packed schema may inflate to."""
_FORMAT: Final = 1


@attrs.frozen
class FieldSchema:
    """One field: its name on the wire, its type as text, and whether a reader may leave it out."""

    name: str
    type: str
    has_default: bool


@attrs.frozen
class ClassSchema:
    type_id: int
    name: str
    """``module.QualName`` where it was registered: for messages only (classes are matched by ``type_id``)."""
    fields: tuple[FieldSchema, ...]


@attrs.frozen
class Incompatibility:
    """Why two schemas cannot talk: the class (by our name, or the peer's when we lack it) and the field."""

    type_id: int
    class_name: str
    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.class_name} (type id {self.type_id}), field {self.field!r}: {self.problem}"


# ------------------------------------------------------------------------------------------- describing classes


_NONE_TYPE: Final = type(None)


def type_text(tp: object, name_of: Callable[[type], str | None]) -> str:
    """An annotation as text, equal on two sides exactly when they declare the same type.

    ``name_of`` names registered classes (by type id, so a moved or renamed class stays the same type);
    other classes go by their qualified name. Union members are sorted, so ``int | None`` equals
    ``None | int``. Unresolved string annotations stay as written.
    """
    if tp is Any or tp is object or tp is attrs.NOTHING or tp is None:
        return "Any" if tp is not None else "None"
    if tp is _NONE_TYPE:
        return "None"
    if isinstance(tp, str):
        return tp
    if isinstance(tp, typing.TypeVar):
        return "Any"
    origin = typing.get_origin(tp)
    if origin is not None:
        args = typing.get_args(tp)
        if origin is typing.Union or type(tp).__name__ == "UnionType":
            return " | ".join(sorted({type_text(arg, name_of) for arg in args}))
        if origin is typing.Literal:
            return f"Literal[{', '.join(sorted(repr(arg) for arg in args))}]"
        if origin is typing.Annotated:
            return type_text(args[0], name_of)
        head = getattr(origin, "__name__", None) or repr(origin)
        if not args:
            return head
        return f"{head}[{', '.join('...' if arg is Ellipsis else type_text(arg, name_of) for arg in args)}]"
    if isinstance(tp, type):
        named = name_of(tp)
        if named is not None:
            return named
        if tp.__module__ == "builtins":
            return tp.__qualname__
        if issubclass(tp, enum.Enum):
            return f"enum {tp.__qualname__}"
        return tp.__qualname__
    return repr(tp)


def resolved_fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    """The class's attrs fields with string annotations resolved where they can be (left as text where not)."""
    try:
        attrs.resolve_types(cls)
    except Exception:  # an annotation naming something not importable here: compared as written
        pass
    return tuple(attrs.fields(cls))


def describe(cls: type, type_id: int, name: str, name_of: Callable[[type], str | None]) -> ClassSchema:
    fields = tuple(
        FieldSchema(
            field.name,
            type_text(field.type if field.type is not None else Any, name_of),
            field.default is not attrs.NOTHING,
        )
        for field in resolved_fields(cls)
    )
    return ClassSchema(type_id, name, fields)


# ------------------------------------------------------------------------------------------- the rules


def incompatibility(
    ours: Sequence[ClassSchema], theirs: Sequence[ClassSchema], here: str = "here", there: str = "the peer"
) -> Incompatibility | None:
    """The first difference that stops the two sides from reading each other's messages; None when they can.

    Classes are compared in type id order, fields in our order (then the peer's extra ones), so the answer is
    the same every time. ``here`` and ``there`` name the two sides in the problem's text.
    """
    by_id = {schema.type_id: schema for schema in theirs}
    for mine in sorted(ours, key=lambda schema: schema.type_id):
        other = by_id.get(mine.type_id)
        if other is None:
            continue
        their_fields = {field.name: field for field in other.fields}
        for field in mine.fields:
            peer = their_fields.get(field.name)
            if peer is None:
                if not field.has_default:
                    return Incompatibility(
                        mine.type_id,
                        mine.name,
                        field.name,
                        f"has no default on {here} and {there} does not have it (give it a default, or add it to "
                        f"{there})",
                    )
            elif peer.type != field.type:
                return Incompatibility(
                    mine.type_id, mine.name, field.name, f"is {field.type} on {here} but {peer.type} on {there}"
                )
        mine_names = {field.name for field in mine.fields}
        for peer in other.fields:
            if peer.name not in mine_names and not peer.has_default:
                return Incompatibility(
                    mine.type_id,
                    mine.name,
                    peer.name,
                    f"{there} has it without a default and {here} does not have it (give it a default on {there}, "
                    f"or add it to {here})",
                )
    return None


# ------------------------------------------------------------------------------------------- on the wire


def pack(schemas: Sequence[ClassSchema]) -> bytes:
    """Compressed msgpack: ``[format, [[type_id, name, [[field, type, has_default], ...]], ...]]``."""
    body = msgpack.packb(
        [
            _FORMAT,
            [
                [schema.type_id, schema.name, [[f.name, f.type, f.has_default] for f in schema.fields]]
                for schema in schemas
            ],
        ],
        use_bin_type=True,
    )
    return zlib.compress(body, 9)


def _text(value: object, what: str) -> str:
    if type(value) is not str or len(value) > MAX_TEXT_LENGTH:
        raise SerializationError(f"schema: {what} must be a str of at most {MAX_TEXT_LENGTH} characters")
    return value


def unpack(data: bytes) -> list[ClassSchema]:
    """Inverse of :func:`pack` for untrusted bytes: SerializationError for anything malformed or over a bound."""
    try:
        inflater = zlib.decompressobj()
        body = inflater.decompress(data, MAX_PACKED_LENGTH)
        if inflater.unconsumed_tail or not inflater.eof:
            raise SerializationError(f"schema: over {MAX_PACKED_LENGTH} bytes inflated, or truncated")
        value = msgpack.unpackb(body, raw=False, strict_map_key=True, max_array_len=MAX_FIELDS * 3 + MAX_CLASSES)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"schema: undecodable ({type(exc).__name__})") from exc
    if type(value) is not list or len(value) != 2 or value[0] != _FORMAT or type(value[1]) is not list:
        raise SerializationError("schema: not a [format, classes] pair of a known format")
    if len(value[1]) > MAX_CLASSES:
        raise SerializationError(f"schema: more than {MAX_CLASSES} classes")
    schemas = []
    for entry in value[1]:
        if type(entry) is not list or len(entry) != 3 or type(entry[0]) is not int or type(entry[2]) is not list:
            raise SerializationError("schema: a class must be [type_id, name, fields]")
        if len(entry[2]) > MAX_FIELDS:
            raise SerializationError(f"schema: a class with more than {MAX_FIELDS} fields")
        fields = []
        for field in entry[2]:
            if type(field) is not list or len(field) != 3 or type(field[2]) is not bool:
                raise SerializationError("schema: a field must be [name, type, has_default]")
            fields.append(FieldSchema(_text(field[0], "a field name"), _text(field[1], "a type"), field[2]))
        schemas.append(ClassSchema(entry[0], _text(entry[1], "a class name"), tuple(fields)))
    return schemas


class CompatibilityCheck:
    """One end point's side of the handshake's check, with a bounded memory of the packed schemas already judged
    (a thousand clients of one older version cost one comparison)."""

    def __init__(
        self,
        registration_hash: bytes,
        schemas: Sequence[ClassSchema],
        *,
        here: str = "the server",
        there: str = "the client",
        memory: int = 64,
    ) -> None:
        self.registration_hash = registration_hash
        self.schemas = tuple(schemas)
        self._here = here
        self._there = there
        self._memory = memory
        self._judged: dict[bytes, Incompatibility | None] = {}

    def verdict(self, their_hash: bytes, packed: bytes | None) -> Incompatibility | None:
        """None when the peer whose registration hash and packed schemas these are can talk with us."""
        if their_hash == self.registration_hash:
            return None
        if packed is None:
            return Incompatibility(
                0,
                "",
                "",
                f"the registered classes differ, and {self._there}'s schemas did not fit in its handshake to be "
                f"compared: register the same classes (fields, types, defaults) on both sides",
            )
        if packed in self._judged:
            return self._judged[packed]
        try:
            theirs = unpack(packed)
        except SerializationError as exc:
            found: Incompatibility | None = Incompatibility(0, "", "", f"{self._there}'s schemas are malformed: {exc}")
        else:
            found = incompatibility(self.schemas, theirs, self._here, self._there)
        if len(self._judged) >= self._memory:
            self._judged.pop(next(iter(self._judged)))
        self._judged[packed] = found
        return found
