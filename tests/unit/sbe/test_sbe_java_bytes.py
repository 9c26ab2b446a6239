"""Our codecs against the bytes Aeron 1.15.1's own generated SBE codecs produce (from the peer's jar).

Every message of the 1.15.1 archive schema and of its mark-file schema (and of the cluster's two schemas, for their
repeating groups and raw var data) is encoded by Java's
``io.aeron.archive.codecs.*Encoder`` with two sets of values (representative ones, and each type's extremes and
empty strings); our encoder must produce the same bytes and our decoder must read Java's bytes back to the values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from driver.archive.codecs import LEGACY, LEGACY_MARK, ArchiveDispatcher
from driver.sbe import MessageCodec, MessageSchema, load_schema_resource, snake_case
from driver.sbe.schema import EncodedType, EnumType, Group, Message
from support.aeron_java import AeronJava
from support.java_programs import JavacUnavailableError, JavaProgram, compile_java, sbe_encoder

pytestmark = [pytest.mark.interop, pytest.mark.process]

CLUSTER = load_schema_resource("driver", "cluster/schemas/aeron-1.15.1/aeron-cluster-codecs.xml")
CLUSTER_MARK = load_schema_resource("driver", "cluster/schemas/aeron-1.15.1/aeron-cluster-mark-codecs.xml")
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


def values_for(schema: MessageSchema, block: Message | Group, extreme: bool, salt: int = 0) -> dict[str, Any]:
    """Values by schema name: groups as lists of entries (two typical ones, or one of extremes)."""
    values: dict[str, Any] = {}
    for f in block.fields:
        if f.presence != "constant":
            values[f.name] = _value(schema, f.id + salt, f.type, extreme)
    for g in block.groups:
        values[g.name] = [values_for(schema, g, extreme, salt + n) for n in range(1 if extreme else 2)]
    for d in block.data:
        if d.character_encoding is None:
            values[d.name] = b"" if extreme and d.id % 2 else bytes(range(d.id, d.id + 40))
        elif extreme and d.id % 2:
            values[d.name] = ""
        else:
            values[d.name] = ERROR if "error" in d.name.lower() else f"{CHANNEL}#{d.id + salt}"
    return values


def _tokens(schema: MessageSchema, block: Message | Group, values: dict[str, Any]) -> list[str]:
    tokens = []
    for f in block.fields:
        if f.name not in values:
            continue
        value = values[f.name]
        if isinstance(f.type, EnumType):
            value = schema.enums[f.type.name](value).name
        tokens.append(f"{f.name}={quote(str(value), safe='')}")
    for g in block.groups:
        tokens.append(f"[{g.name}={len(values[g.name])}")
        for entry in values[g.name]:
            tokens.append("+")
            tokens.extend(_tokens(schema, g, entry))
        tokens.append("]")
    for d in block.data:
        value = values[d.name]
        tokens.append(f"{d.name}:={value.hex()}" if isinstance(value, bytes) else f"{d.name}={quote(value, safe='')}")
    return tokens


def java_line(schema: MessageSchema, codec: MessageCodec, values: dict[str, Any]) -> str:
    return " ".join([f"{schema.package}.{codec.name}", *_tokens(schema, codec.message, values)])


CASES = [
    (schema, codec, extreme)
    for schema in (LEGACY, LEGACY_MARK, CLUSTER, CLUSTER_MARK)
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
        found[(f"{codec.schema_id}.{codec.name}", extreme)] = bytes.fromhex(hex_bytes)
    return found


def _python_values(values: dict[str, Any]) -> dict[str, Any]:
    return {snake_case(k): [_python_values(e) for e in v] if isinstance(v, list) else v for k, v in values.items()}


@pytest.mark.parametrize(
    ("schema", "codec", "extreme"),
    CASES,
    ids=[f"{s.package.rsplit('.', 1)[-1]}-{c.name}-{'extreme' if e else 'typical'}" for s, c, e in CASES],
)
def test_our_bytes_are_javas_bytes_and_we_read_javas(
    java_bytes: dict[tuple[str, bool], bytes], schema: MessageSchema, codec: MessageCodec, extreme: bool
) -> None:
    theirs = java_bytes[(f"{codec.schema_id}.{codec.name}", extreme)]
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
    compared = {name for name, _ in java_bytes}
    for schema in (LEGACY, LEGACY_MARK, CLUSTER, CLUSTER_MARK):
        assert {f"{schema.id}.{name}" for name in schema.messages} <= compared
    assert len(compared) == 22 + 1 + 47 + 1
    assert java_bytes[("111.SnapshotRecordings", False)]  # a message with a repeating group


ECHO = """
public final class Echo
{
    public static void main(final String[] args)
    {
        System.out.println(String.join(" ", args) + " " + io.aeron.archive.codecs.ReplayRequestEncoder.BLOCK_LENGTH);
    }
}
"""


def test_a_java_program_compiles_once_per_source_and_runs_with_args(aeron_java: AeronJava, tmp_path: Path) -> None:
    try:
        program = compile_java(aeron_java, ECHO, "Echo", cache_dir=tmp_path)
    except JavacUnavailableError as exc:
        pytest.skip(str(exc))
    assert program.run("a", "b c") == "a b c 44\n"  # compiled against the jar: 1.15.1's ReplayRequest block
    marker = program.classes / ".complete"
    built = marker.stat().st_mtime_ns
    again = compile_java(aeron_java, ECHO, "Echo", cache_dir=tmp_path)
    assert again.classes == program.classes
    assert marker.stat().st_mtime_ns == built
    other = compile_java(aeron_java, ECHO.replace('" "', '"-"'), "Echo", cache_dir=tmp_path)
    assert other.classes != program.classes
    assert other.run("x", "y") == "x-y-44\n"
    assert not list((tmp_path / "java-programs").glob("build-*"))  # no half-built leftovers
