"""Message schemas: how classes are described, the compatibility rules, and the packed form a peer sends."""

from __future__ import annotations

import enum
import zlib
from typing import Any, Literal, Optional

import attrs
import msgpack
import pytest

from endpoint.errors import SerializationError
from endpoint.schema import (
    MAX_FIELDS,
    ClassSchema,
    CompatibilityCheck,
    FieldSchema,
    Incompatibility,
    incompatibility,
    pack,
    type_text,
    unpack,
)
from endpoint.serialization import Serialization


class Color(enum.Enum):
    RED = 1


@attrs.define
class Vec:
    x: float
    y: float


@attrs.define
class Everything:
    a: int
    b: list[str]
    c: dict[str, float]
    d: tuple[int, ...]
    e: Optional[bytes]  # noqa: UP045 - the old spelling must give the same text as the new one
    f: float | None
    g: Vec
    h: Literal["a", "b"]
    i: Color
    j: Any
    k: int = 0
    m: list[int] = attrs.field(factory=list)


def no_names(cls: type) -> str | None:
    return None


def test_types_as_text() -> None:
    ser = Serialization()
    ser.register(Vec, type_id=4)
    ser.register(Everything, type_id=5)
    fields = {f.name: (f.type, f.has_default) for f in ser.schemas()[1].fields}
    assert fields == {
        "a": ("int", False),
        "b": ("list[str]", False),
        "c": ("dict[str, float]", False),
        "d": ("tuple[int, ...]", False),
        "e": ("None | bytes", False),
        "f": ("None | float", False),
        "g": ("#4", False),  # a registered class goes by its type id: renaming or moving it changes nothing
        "h": ("Literal['a', 'b']", False),
        "i": ("enum Color", False),
        "j": ("Any", False),
        "k": ("int", True),
        "m": ("list[int]", True),
    }
    assert type_text(Vec, no_names) == "Vec"
    assert type_text("NotResolvable", no_names) == "NotResolvable"


def schema(type_id: int, *fields: tuple[str, str, bool], name: str = "Msg") -> ClassSchema:
    return ClassSchema(type_id, name, tuple(FieldSchema(*field) for field in fields))


BASE = [schema(1, ("seq", "int", False), ("x", "float", False)), schema(2, ("text", "str", False))]


@pytest.mark.parametrize(
    "theirs",
    [
        BASE,
        # a field added with a default
        [schema(1, ("seq", "int", False), ("x", "float", False), ("speed", "float", True)), BASE[1]],
        # fields in another order, the class under another name
        [schema(1, ("x", "float", False), ("seq", "int", False), name="Renamed"), BASE[1]],
        # a class only one side has, either way
        [BASE[0]],
        [*BASE, schema(3, ("hp", "int", False))],
    ],
)
def test_compatible_differences(theirs: list[ClassSchema]) -> None:
    assert incompatibility(BASE, theirs) is None
    assert incompatibility(theirs, BASE) is None


def test_a_field_with_a_default_removed_on_one_side_is_compatible() -> None:
    old = [schema(1, ("seq", "int", False), ("note", "str", True))]
    new = [schema(1, ("seq", "int", False))]
    assert incompatibility(old, new) is None
    assert incompatibility(new, old) is None


def test_a_changed_type_is_named() -> None:
    theirs = [schema(1, ("seq", "int", False), ("x", "str", False)), BASE[1]]
    found = incompatibility(BASE, theirs, "the server", "the client")
    assert found == Incompatibility(1, "Msg", "x", "is float on the server but str on the client")
    assert str(found) == "Msg (type id 1), field 'x': is float on the server but str on the client"


def test_a_field_without_a_default_on_one_side_only_is_named_from_either_side() -> None:
    theirs = [schema(1, ("seq", "int", False), ("x", "float", False), ("hp", "int", False)), BASE[1]]
    found = incompatibility(BASE, theirs)
    assert found is not None
    assert (found.type_id, found.field) == (1, "hp")
    assert "the peer has it without a default" in found.problem
    found = incompatibility(theirs, BASE)
    assert found is not None
    assert (found.type_id, found.field) == (1, "hp")
    assert "has no default on here" in found.problem


def test_the_first_problem_in_type_id_order_is_the_one_named() -> None:
    theirs = [schema(1, ("seq", "str", False), ("x", "float", False)), schema(2, ("text", "bytes", False))]
    reversed_ours = list(reversed(BASE))
    assert incompatibility(reversed_ours, theirs) == incompatibility(BASE, theirs)
    found = incompatibility(BASE, theirs)
    assert found is not None
    assert found.type_id == 1


def test_pack_round_trip_and_bounds() -> None:
    packed = pack(BASE)
    assert unpack(packed) == BASE
    assert len(packed) < len(msgpack.packb([1, [[1, "Msg", []]]])) * 10


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not zlib",
        zlib.compress(b"\xc1"),
        zlib.compress(msgpack.packb([2, []])),  # unknown format
        zlib.compress(msgpack.packb([1, [[1, "M", [["a", "int", "yes"]]]]])),
        zlib.compress(msgpack.packb([1, [[1, "M", [["a", 5, True]]]]])),
        zlib.compress(msgpack.packb([1, [["1", "M", []]]])),
        zlib.compress(msgpack.packb([1, [[1, "M" * 600, []]]])),
        zlib.compress(msgpack.packb([1, [[1, "M", [["a", "int", True]] * (MAX_FIELDS + 1)]]])),
        zlib.compress(b"\x00" * (2 << 20)),  # inflates past the bound
        zlib.compress(msgpack.packb([1, []]))[:-3],  # truncated
    ],
)
def test_unpack_refuses_what_is_malformed_or_too_big(data: bytes) -> None:
    with pytest.raises(SerializationError, match="schema"):
        unpack(data)


def test_the_check_passes_equal_hashes_unread_and_remembers_verdicts() -> None:
    check = CompatibilityCheck(b"h" * 32, BASE, memory=2)
    assert check.verdict(b"h" * 32, b"garbage is never read with an equal hash") is None
    without = check.verdict(b"x" * 32, None)
    assert without is not None
    assert "did not fit" in without.problem
    broken = check.verdict(b"x" * 32, b"garbage")
    assert broken is not None
    assert "malformed" in broken.problem
    changed = pack([schema(1, ("seq", "int", False), ("x", "str", False))])
    first = check.verdict(b"x" * 32, changed)
    assert first is not None
    assert first.field == "x"
    assert check.verdict(b"x" * 32, changed) is first
    for i in range(5):  # bounded memory
        check.verdict(b"x" * 32, pack([schema(10 + i, ("a", "int", True))]))
    assert len(check._judged) == 2


def test_a_serializations_schemas_and_hash_follow_what_matters() -> None:
    @attrs.define
    class Move:
        seq: int
        x: float

    @attrs.define
    class MoveV2:
        seq: int
        x: float
        speed: float = 1.0

    old, new = Serialization(), Serialization()
    old.register(Move, type_id=1)
    new.register(MoveV2, type_id=1)
    assert old.registration_hash != new.registration_hash
    assert incompatibility(old.schemas(), unpack(new.packed_schemas())) is None
