"""Our codecs against the bytes Aeron 1.15.1's own generated SBE codecs produce (from the peer's jar).

Every message of the 1.15.1 archive schema and of its mark-file schema is encoded by Java's
``io.aeron.archive.codecs.*Encoder`` with two sets of values (representative ones, and each type's extremes and
empty strings); our encoder must produce the same bytes and our decoder must read Java's bytes back to the values.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from driver.archive.codecs import LEGACY, LEGACY_MARK, ArchiveDispatcher
from driver.sbe import MessageCodec, MessageSchema, snake_case
from driver.sbe.schema import EncodedType, EnumType, Group, Message
from support.aeron_java import AeronJava
from support.java_programs import JavacUnavailableError, JavaProgram, sbe_encoder

pytestmark = [pytest.mark.interop, pytest.mark.process]

CHANNEL = "aeron:udp?endpoint=localhost:40123|term-length=65536|mtu=8192"
ERROR = "recording 42 unknown: +/%= & more"


@pytest.fixture(scope="module")
def java_sbe(aeron_java: AeronJava) -> JavaProgram:
    try:
        return sbe_encoder(aeron_java)
    except JavacUnavailableError as exc:
        pytest.skip(str(exc))


def _value(schema: MessageSchema, f_id: int, t: Any, extreme: bool) -> Any:
    if isinstance(t, EnumType):
        values = sorted(t.values.values())
        return values[0] if extreme else values[-1]
    assert isinstance(t, EncodedType)
    p = t.primitive
    bits = p.size * 8
    signed = p.code.islower()
    if extreme:
        if signed:
            return -(2 ** (bits - 1)) if f_id % 2 == 0 else 2 ** (bits - 1) - 1
        return 2**bits - 1 if f_id % 2 else 0
    magnitude = (f_id * 0x0102030405 + 7) % (2 ** (bits - 1) - 1)
    return -magnitude if signed and f_id % 2 == 0 else magnitude


def values_for(schema: MessageSchema, block: Message | Group, extreme: bool) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in block.fields:
        if f.presence != "constant":
            values[f.name] = _value(schema, f.id, f.type, extreme)
    for d in block.data:
        values[d.name] = "" if extreme and d.id % 2 else (ERROR if "error" in d.name.lower() else f"{CHANNEL}#{d.id}")
    return values


def java_line(schema: MessageSchema, codec: MessageCodec, values: dict[str, Any]) -> str:
    tokens = [f"{schema.package}.{codec.name}"]
    for f in codec.message.fields:
        if f.name not in values:
            continue
        value = values[f.name]
        if isinstance(f.type, EnumType):
            value = schema.enums[f.type.name](value).name
        tokens.append(f"{f.name}={quote(str(value), safe='')}")
    for d in codec.message.data:
        tokens.append(f"{d.name}={quote(values[d.name], safe='')}")
    return " ".join(tokens)


CASES = [
    (schema, codec, extreme)
    for schema in (LEGACY, LEGACY_MARK)
    for codec in schema.messages.values()
    for extreme in (False, True)
]


@pytest.fixture(scope="module")
def java_bytes(java_sbe: JavaProgram) -> dict[tuple[str, bool], bytes]:
    """Java's encoding of every case, from one run of the program."""
    lines = [java_line(s, c, values_for(s, c.message, extreme)) for s, c, extreme in CASES]
    out = java_sbe.run(input_text="\n".join(lines) + "\n", timeout_s=120.0).splitlines()
    assert len(out) == len(CASES), out
    found: dict[tuple[str, bool], bytes] = {}
    for (_, codec, extreme), line in zip(CASES, out, strict=True):
        name, hex_bytes = line.split(" ")
        assert name == codec.name
        found[(codec.name, extreme)] = bytes.fromhex(hex_bytes)
    return found


def _python_values(values: dict[str, Any]) -> dict[str, Any]:
    return {snake_case(k): v for k, v in values.items()}


@pytest.mark.parametrize(
    ("schema", "codec", "extreme"),
    CASES,
    ids=[f"{s.package.rsplit('.', 1)[-1]}-{c.name}-{'extreme' if e else 'typical'}" for s, c, e in CASES],
)
def test_our_bytes_are_javas_bytes_and_we_read_javas(
    java_bytes: dict[tuple[str, bool], bytes], schema: MessageSchema, codec: MessageCodec, extreme: bool
) -> None:
    theirs = java_bytes[(codec.name, extreme)]
    values = _python_values(values_for(schema, codec.message, extreme))
    assert codec.encode(values) == theirs
    decoded = codec.decode(theirs)
    assert {k: v for k, v in decoded.items() if k in values} == values
    if schema is LEGACY:
        dec = ArchiveDispatcher().wrap(theirs)
        name, version = dec.NAME, dec.SCHEMA_VERSION
        assert (name, version) == (codec.name, 0)
        assert dec.skip() == len(theirs) - 8


def test_every_legacy_message_was_compared(java_bytes: dict[tuple[str, bool], bytes]) -> None:
    assert {name for name, _ in java_bytes} == set(LEGACY.messages) | set(LEGACY_MARK.messages)
    assert len(LEGACY.messages) == 22
