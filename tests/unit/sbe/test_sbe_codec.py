"""The generic SBE codec over a schema that uses every construct: layouts, nulls, versions, groups, data, errors.

The expected bytes are written out by hand from the SBE 1.0 layout rules (little-endian unless the schema says
otherwise, fields packed in order or at their offset, groups then var data after the block).
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.sbe import (
    MessageHeader,
    SbeDecodeError,
    SbeEncodeError,
    SbeError,
    SbeSchemaError,
    SbeSchemaIdMismatchError,
    SbeUnknownTemplateError,
    load_schema,
    parse_schema,
)

SCHEMA = """<?xml version="1.0" encoding="UTF-8"?>
<sbe:messageSchema xmlns:sbe="http://fixprotocol.io/2016/sbe" package="test" id="7" version="3"
                   byteOrder="{order}">
  <types>
    <composite name="messageHeader">
      <type name="blockLength" primitiveType="uint16"/>
      <type name="templateId" primitiveType="uint16"/>
      <type name="schemaId" primitiveType="uint16"/>
      <type name="version" primitiveType="uint16"/>
    </composite>
    <composite name="groupSizeEncoding">
      <type name="blockLength" primitiveType="uint16"/>
      <type name="numInGroup" primitiveType="uint16"/>
    </composite>
    <composite name="varStringEncoding">
      <type name="length" primitiveType="uint32" maxValue="1073741824"/>
      <type name="varData" primitiveType="uint8" length="0" characterEncoding="UTF-8"/>
    </composite>
    <composite name="varDataEncoding">
      <type name="length" primitiveType="uint16"/>
      <type name="varData" primitiveType="uint8" length="0"/>
    </composite>
    <composite name="Decimal">
      <type name="mantissa" primitiveType="int64"/>
      <type name="exponent" primitiveType="int8"/>
    </composite>
    <enum name="Side" encodingType="uint8">
      <validValue name="BUY">1</validValue>
      <validValue name="SELL">2</validValue>
    </enum>
    <enum name="Kind" encodingType="char">
      <validValue name="LIMIT">L</validValue>
      <validValue name="MARKET">M</validValue>
    </enum>
    <set name="Flags" encodingType="uint16">
      <choice name="urgent">0</choice>
      <choice name="retry">9</choice>
    </set>
    <type name="Symbol" primitiveType="char" length="8"/>
    <type name="Raw" primitiveType="uint8" length="4"/>
    <type name="Triple" primitiveType="int16" length="3"/>
    <type name="OptQty" primitiveType="int32" presence="optional" nullValue="0"/>
    <type name="Magic" primitiveType="uint16" presence="constant">4242</type>
    <type name="Venue" primitiveType="char" length="4" presence="constant">XLON</type>
  </types>
  <sbe:message name="Order" id="1" description="every construct">
    <field name="id" id="1" type="uint64"/>
    <field name="symbol" id="2" type="Symbol"/>
    <field name="side" id="3" type="Side"/>
    <field name="kind" id="4" type="Kind"/>
    <field name="flags" id="5" type="Flags"/>
    <field name="price" id="6" type="Decimal"/>
    <field name="ratio" id="7" type="double"/>
    <field name="small" id="8" type="float"/>
    <field name="raw" id="9" type="Raw"/>
    <field name="triple" id="10" type="Triple"/>
    <field name="qty" id="11" type="OptQty"/>
    <field name="magic" id="12" type="Magic"/>
    <field name="venue" id="13" type="Venue"/>
    <field name="defaultSide" id="14" type="Side" presence="constant" valueRef="Side.SELL"/>
    <field name="late" id="15" type="int32" sinceVersion="2"/>
    <field name="padded" id="16" type="int16" offset="64"/>
    <group name="fills" id="20" dimensionType="groupSizeEncoding">
      <field name="fillId" id="21" type="int32"/>
      <field name="fillQty" id="22" type="OptQty"/>
      <group name="legs" id="23">
        <field name="leg" id="24" type="int8"/>
        <data name="legNote" id="25" type="varStringEncoding"/>
      </group>
      <data name="fillNote" id="26" type="varStringEncoding"/>
    </group>
    <group name="extras" id="30" sinceVersion="3">
      <field name="extra" id="31" type="int64"/>
    </group>
    <data name="text" id="40" type="varStringEncoding"/>
    <data name="blob" id="41" type="varDataEncoding"/>
    <data name="newer" id="42" type="varStringEncoding" sinceVersion="3"/>
  </sbe:message>
  <sbe:message name="Ping" id="2" blockLength="16">
    <field name="seq" id="1" type="int64"/>
  </sbe:message>
</sbe:messageSchema>
"""

LITTLE = load_schema(SCHEMA.format(order="littleEndian"))
BIG = load_schema(SCHEMA.format(order="bigEndian"))

VALUES = {
    "id": 2**64 - 2,
    "symbol": "EUR/USD",
    "side": 2,
    "kind": ord("L"),
    "flags": 1 | 1 << 9,
    "price": {"mantissa": -12345, "exponent": -3},
    "ratio": 0.25,
    "small": 1.5,
    "raw": b"\x01\x02\x03\x04",
    "triple": (1, -2, 3),
    "qty": 17,
    "late": -9,
    "padded": 300,
    "fills": [
        {
            "fill_id": 1,
            "fill_qty": 5,
            "legs": [{"leg": 1, "leg_note": "a"}, {"leg": 2, "leg_note": ""}],
            "fill_note": "x",
        },
        {"fill_id": 2, "fill_qty": 0, "legs": [], "fill_note": "ünïcode"},
    ],
    "extras": [{"extra": 99}],
    "text": "hello",
    "blob": b"\x00\xff",
    "newer": "n",
}


def expected_bytes(order: str) -> bytes:
    """The Order message with VALUES, laid out by hand."""
    o = "<" if order == "littleEndian" else ">"
    block = bytearray(66)
    struct.pack_into(o + "Q", block, 0, VALUES["id"])
    block[8:16] = b"EUR/USD\x00"
    block[16] = 2
    block[17] = ord("L")
    struct.pack_into(o + "H", block, 18, 1 | 1 << 9)
    struct.pack_into(o + "qb", block, 20, -12345, -3)
    struct.pack_into(o + "d", block, 29, 0.25)
    struct.pack_into(o + "f", block, 37, 1.5)
    block[41:45] = b"\x01\x02\x03\x04"
    struct.pack_into(o + "3h", block, 45, 1, -2, 3)
    struct.pack_into(o + "i", block, 51, 17)
    struct.pack_into(o + "i", block, 55, -9)  # constants take no space; late follows qty
    struct.pack_into(o + "h", block, 64, 300)
    out = bytearray(struct.pack(o + "4H", 66, 1, 7, 3)) + block

    def var(text: bytes, fmt: str = "I") -> bytes:
        return struct.pack(o + fmt, len(text)) + text

    out += struct.pack(o + "2H", 8, 2)
    out += struct.pack(o + "ii", 1, 5) + struct.pack(o + "2H", 1, 2)
    out += b"\x01" + var(b"a") + b"\x02" + var(b"")
    out += var(b"x")
    out += struct.pack(o + "ii", 2, 0) + struct.pack(o + "2H", 1, 0) + var("ünïcode".encode())
    out += struct.pack(o + "2H", 8, 1) + struct.pack(o + "q", 99)
    out += var(b"hello") + var(b"\x00\xff", "H") + var(b"n")
    return bytes(out)


@pytest.mark.parametrize(("schema", "order"), [(LITTLE, "littleEndian"), (BIG, "bigEndian")])
def test_every_construct_encodes_to_the_sbe_layout_and_back(schema, order) -> None:
    codec = schema["Order"]
    assert codec.block_length == 66
    data = codec.encode(VALUES)
    assert data == expected_bytes(order)
    decoded = codec.decode(data)
    assert decoded == {**VALUES, "magic": 4242, "venue": "XLON", "default_side": 2}
    assert decoded["magic"] == 4242


def test_the_flyweight_api_reads_and_writes_in_place() -> None:
    codec = LITTLE["Order"]
    buffer = bytearray(512)
    enc = codec.encoder().wrap_and_apply_header(buffer, 16)
    enc.id = 7
    enc.symbol = "AB"
    enc.side = LITTLE.enums["Side"].BUY
    enc.kind = ord("M")
    enc.flags = LITTLE.sets["Flags"].retry
    enc.price.mantissa = 5
    enc.price.exponent = 2
    enc.ratio = math.inf
    enc.small = -0.5
    enc.raw = b"\x09"
    enc.triple = (0, 0, 7)
    enc.qty = None  # optional: null
    enc.late = 1
    enc.padded = -1
    fills = enc.fills_count(1)
    fill = fills.next()
    fill.fill_id = 3
    fill.fill_qty = 4
    legs = fill.legs_count(1)
    legs.next().leg = -1
    legs.put_leg_note("leg")
    fill.put_fill_note(b"note")
    enc.extras_count(0)
    enc.put_text("t")
    enc.put_blob(memoryview(b"bb"))
    enc.put_newer("")
    length = enc.encoded_length
    assert enc.HEADER_LENGTH == 8

    dec = codec.decoder().wrap_and_check_header(buffer, 16)
    assert (dec.id, dec.symbol, dec.side, dec.kind, dec.flags) == (7, "AB", 1, ord("M"), 512)
    assert LITTLE.sets["Flags"](dec.flags) == LITTLE.sets["Flags"].retry
    assert (dec.price.mantissa, dec.price.exponent, dec.ratio, dec.small) == (5, 2, math.inf, -0.5)
    assert (dec.raw, dec.triple, dec.qty, dec.late, dec.padded) == (b"\x09\x00\x00\x00", (0, 0, 7), 0, 1, -1)
    assert dec.qty == codec.null_value("qty") == 0
    assert (dec.magic, dec.venue, dec.default_side) == (4242, "XLON", 2)
    group = dec.fills()
    assert len(group) == group.count == 1
    for entry in group:
        assert (entry.fill_id, entry.fill_qty) == (3, 4)
        assert [(leg.leg, leg.leg_note()) for leg in entry.legs()] == [(-1, "leg")]
        assert entry.fill_note_length() == 4
        assert entry.fill_note() == "note"
    assert dec.extras().count == 0
    assert dec.text() == "t"
    assert dec.blob() == b"bb"
    assert dec.newer() == ""
    assert dec.encoded_length == length
    with pytest.raises(AttributeError):
        dec.no_such_field  # noqa: B018


def test_a_reused_decoder_rewraps_without_leftovers() -> None:
    codec = LITTLE["Order"]
    first = codec.encode({**VALUES, "text": "first"})
    second = codec.encode({**VALUES, "fills": [], "text": "second"})
    dec = codec.decoder()
    assert dec.wrap_and_check_header(first, 0).to_dict()["text"] == "first"
    assert dec.wrap_and_check_header(second, 0).to_dict()["text"] == "second"
    assert dec.skip() == len(second) - 8


def old_order(values: dict, version: int) -> bytes:
    """The Order message as a sender of ``version`` writes it: no extras group before v3, no newer data before v3."""
    codec = LITTLE["Order"]
    buffer = bytearray(1024)
    enc = codec.encoder().wrap_and_apply_header(buffer, 0)
    for name, write, _ in enc._FIELD_WRITERS:
        if name != "late" or version >= 2:
            write(enc, values[name])
    fills = enc.fills_count(len(values["fills"]))
    for fill in values["fills"]:
        entry = fills.next()
        entry.fill_id = fill["fill_id"]
        entry.fill_qty = fill["fill_qty"]
        legs = entry.legs_count(len(fill["legs"]))
        for leg in fill["legs"]:
            legs.next().leg = leg["leg"]
            legs.put_leg_note(leg["leg_note"])
        entry.put_fill_note(fill["fill_note"])
    if version >= 3:
        extras = enc.extras_count(len(values["extras"]))
        for extra in values["extras"]:
            extras.next().extra = extra["extra"]
    enc.put_text(values["text"])
    enc.put_blob(values["blob"])
    if version >= 3:
        enc.put_newer(values["newer"])
    struct.pack_into("<H", buffer, 6, version)
    return bytes(buffer[: 8 + enc.encoded_length])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_older_acting_version_reads_nulls_for_newer_fields_groups_and_data(version: int) -> None:
    """A sender that knew neither ``late`` (v2) nor ``extras``/``newer`` (v3): they read as null or empty."""
    data = old_order(VALUES, version)
    decoded = LITTLE["Order"].decode(data)
    assert decoded["late"] == (VALUES["late"] if version >= 2 else -(2**31))
    dec = LITTLE["Order"].decoder().wrap_and_check_header(data, 0)
    assert dec.acting_version == version
    if version < 2:
        assert dec.late == -(2**31)  # int32 null: the field is newer than the sender
    assert decoded["extras"] == []
    assert decoded["newer"] == ""
    assert (decoded["text"], decoded["blob"], decoded["fills"]) == (VALUES["text"], VALUES["blob"], VALUES["fills"])
    assert LITTLE["Order"].decoder().wrap_and_check_header(data, 0).skip() == len(data) - 8


def test_a_newer_senders_longer_block_is_skipped_to_reach_groups_and_data() -> None:
    """Forward compatibility: a version-9 peer with a longer block (fields we don't know) still decodes."""
    codec = LITTLE["Ping"]
    assert codec.block_length == 16  # blockLength attribute pads the 8-byte field
    header = struct.pack("<4H", 40, 2, 7, 9)
    body = struct.pack("<q", 77) + bytes(32)
    dec = LITTLE.dispatcher().wrap(header + body)
    assert (dec.NAME, dec.seq, dec.acting_version, dec.acting_block_length, dec.encoded_length) == (
        "Ping",
        77,
        9,
        40,
        40,
    )

    order = LITTLE["Order"]
    data = bytearray(order.encode(VALUES))
    bigger = data[:8] + data[8 : 8 + 66] + b"\xee" * 10 + data[8 + 66 :]
    struct.pack_into("<HH", bigger, 0, 76, 1)
    struct.pack_into("<H", bigger, 6, 5)
    assert order.decode(bytes(bigger)) == order.decode(bytes(data))


def test_header_dispatch_errors_are_typed() -> None:
    ping = LITTLE["Ping"].encode({"seq": 1})
    dispatcher = LITTLE.dispatcher()
    assert dispatcher.wrap(ping).seq == 1
    unknown = bytearray(ping)
    struct.pack_into("<H", unknown, 2, 99)
    with pytest.raises(SbeUnknownTemplateError) as caught:
        dispatcher.wrap(unknown)
    assert (caught.value.template_id, caught.value.schema_id, caught.value.version) == (99, 7, 3)
    foreign = bytearray(ping)
    struct.pack_into("<H", foreign, 4, 8)
    with pytest.raises(SbeSchemaIdMismatchError) as mismatch:
        dispatcher.wrap(foreign)
    assert (mismatch.value.expected, mismatch.value.actual) == (7, 8)
    with pytest.raises(SbeSchemaIdMismatchError):
        LITTLE["Ping"].decoder().wrap_and_check_header(foreign, 0)
    with pytest.raises(SbeUnknownTemplateError):
        LITTLE["Order"].decoder().wrap_and_check_header(ping, 0)
    with pytest.raises(SbeDecodeError):
        dispatcher.wrap(ping[:7])
    with pytest.raises(SbeDecodeError):
        dispatcher.wrap(ping[:20])  # block cut short
    assert issubclass(SbeUnknownTemplateError, SbeDecodeError)
    assert issubclass(SbeDecodeError, SbeError)
    assert LITTLE.read_header(ping) == MessageHeader(16, 2, 7, 3)


def test_lengths_past_the_buffer_are_decode_errors_not_crashes() -> None:
    codec = LITTLE["Order"]
    data = bytearray(codec.encode(VALUES))
    text_at = len(data) - (4 + 1) - (2 + 2) - (4 + 5)
    assert data[text_at : text_at + 4] == struct.pack("<I", 5)
    struct.pack_into("<I", data, text_at, 10**6)
    with pytest.raises(SbeDecodeError, match="text"):
        codec.decode(data)
    groups = bytearray(codec.encode(VALUES))
    struct.pack_into("<HH", groups, 8 + 66, 8, 60000)
    with pytest.raises(SbeDecodeError, match="fills"):
        codec.decode(groups)
    short_entries = bytearray(codec.encode(VALUES))
    struct.pack_into("<H", short_entries, 8 + 66, 2)  # entries too short for their fields
    with pytest.raises(SbeDecodeError, match="block length"):
        codec.decode(short_entries)
    short_block = bytearray(codec.encode(VALUES))
    struct.pack_into("<H", short_block, 0, 20)
    with pytest.raises(SbeDecodeError, match="block length"):
        codec.decode(short_block)
    for cut in range(0, len(data), 7):
        with pytest.raises(SbeDecodeError):
            codec.decode(codec.encode(VALUES)[:cut])


def test_values_that_do_not_fit_are_encode_errors() -> None:
    codec = LITTLE["Order"]
    enc = codec.encoder().wrap(bytearray(200), 0)
    with pytest.raises(SbeEncodeError, match="symbol"):
        enc.symbol = "TOO LONG FOR EIGHT"
    with pytest.raises(SbeEncodeError, match="id"):
        enc.id = -1
    with pytest.raises(SbeEncodeError, match="side"):
        enc.side = 256
    with pytest.raises(SbeEncodeError, match="triple"):
        enc.triple = (1, 2)
    with pytest.raises(SbeEncodeError, match="fills"):
        enc.fills_count(70000)
    with pytest.raises(SbeEncodeError, match="buffer"):
        enc.fills_count(100)
    group = enc.fills_count(1)
    group.next()
    with pytest.raises(SbeEncodeError, match="more entries"):
        group.next()
    with pytest.raises(SbeEncodeError, match="blob"):
        enc.put_blob(bytes(70000))
    with pytest.raises(SbeEncodeError, match="buffer"):
        enc.put_text("x" * 500)
    with pytest.raises(SbeEncodeError):
        codec.encoder().wrap(bytearray(10), 0)
    with pytest.raises(SbeEncodeError):
        codec.encoder().wrap(bytes(100), 0)
    with pytest.raises(SbeEncodeError, match="required"):
        codec.encode({"id": 1})
    with pytest.raises(SbeEncodeError, match="no field"):
        codec.encode({**VALUES, "bogus": 1})
    with pytest.raises(AttributeError):
        enc.magic = 1  # constants are read-only


def test_atomic_buffer_and_memoryview_work_as_buffers() -> None:
    codec = LITTLE["Ping"]
    backing = bytearray(64)
    atomic = AtomicBuffer(backing)
    codec.encoder().wrap_and_apply_header(atomic, 8).seq = -5
    assert codec.decoder().wrap_and_check_header(atomic, 8).seq == -5
    assert codec.decoder().wrap_and_check_header(memoryview(backing), 8).seq == -5
    assert codec.decoder().wrap_and_check_header(bytes(backing), 8).seq == -5


def test_schema_errors_name_the_problem() -> None:
    with pytest.raises(SbeSchemaError, match="well-formed"):
        parse_schema("<nope")
    with pytest.raises(SbeSchemaError, match="unknown type"):
        load_schema(SCHEMA.format(order="littleEndian").replace('type="Symbol"', 'type="Nope"'))
    with pytest.raises(SbeSchemaError, match="overlaps"):
        load_schema(SCHEMA.format(order="littleEndian").replace('offset="64"', 'offset="3"'))
    with pytest.raises(SbeSchemaError, match="byteOrder"):
        load_schema(SCHEMA.format(order="middleEndian"))
    assert load_schema(SCHEMA.format(order="littleEndian")) is LITTLE  # cached


_names = st.text(st.characters(min_codepoint=1, max_codepoint=0x7E), max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    id_=st.integers(0, 2**64 - 1),
    symbol=_names,
    ratio=st.floats(allow_nan=False),
    qty=st.integers(-(2**31), 2**31 - 1),
    notes=st.lists(st.text(max_size=20), max_size=4),
    blob=st.binary(max_size=100),
    version=st.integers(0, 3),
)
def test_round_trips_any_values_at_any_acting_version(id_, symbol, ratio, qty, notes, blob, version) -> None:
    codec = LITTLE["Order"]
    values = {
        **VALUES,
        "id": id_,
        "symbol": symbol,
        "ratio": ratio,
        "qty": qty,
        "fills": [{"fill_id": i, "fill_qty": i, "legs": [], "fill_note": n} for i, n in enumerate(notes)],
        "blob": blob,
    }
    data = bytearray(codec.encode(values))
    decoded = codec.decode(data)
    assert decoded == {**values, "magic": 4242, "venue": "XLON", "default_side": 2}
    if version < 3:
        dec = codec.decoder().wrap_and_check_header(old_order(values, version), 0)
        assert dec.late == (values["late"] if version >= 2 else -(2**31))
        assert dec.to_dict()["fills"] == values["fills"]


def test_read_and_write_fields_take_the_whole_block_at_once() -> None:
    ping = LITTLE["Ping"]
    buffer = bytearray(64)
    enc = ping.encoder().wrap_and_apply_header(buffer, 0).write_fields(-3)
    assert enc.FIELD_NAMES == ("seq",)
    dec = ping.decoder().wrap_and_check_header(buffer, 0)
    assert dec.read_fields() == (-3,)
    with pytest.raises(SbeEncodeError):
        enc.write_fields(1, 2)
    # A block with strings, arrays and a composite takes the per-field path, values as the properties give them.
    order = LITTLE["Order"]
    data = order.encode(VALUES)
    dec = order.decoder().wrap_and_check_header(data, 0)
    fields = dec.read_fields()
    assert dict(zip(dec.FIELD_NAMES, fields, strict=True))["symbol"] == "EUR/USD"
    assert "magic" not in dec.FIELD_NAMES
    assert len(fields) == len(dec.FIELD_NAMES)
    # An older acting version: the newer field reads null through read_fields as well.
    old = order.decoder().wrap_and_check_header(old_order(VALUES, 1), 0)
    assert dict(zip(old.FIELD_NAMES, old.read_fields(), strict=True))["late"] == -(2**31)


def test_an_encoder_reads_back_what_it_wrote() -> None:
    enc = LITTLE["Order"].encoder().wrap(bytearray(256), 0)
    enc.late = 5  # since version 2: an encoder writes the newest version, so it reads back too
    enc.symbol = "X"
    assert (enc.late, enc.symbol) == (5, "X")


NESTED = """<?xml version="1.0" encoding="UTF-8"?>
<messageSchema package="nested" id="9" version="0" byteOrder="littleEndian">
  <types>
    <composite name="messageHeader">
      <type name="blockLength" primitiveType="uint16"/>
      <type name="templateId" primitiveType="uint16"/>
      <type name="schemaId" primitiveType="uint16"/>
      <type name="version" primitiveType="uint16"/>
    </composite>
    <composite name="groupSizeEncoding">
      <type name="blockLength" primitiveType="uint16"/>
      <type name="numInGroup" primitiveType="uint16"/>
    </composite>
    <enum name="Unit" encodingType="uint8">
      <validValue name="NS">0</validValue>
      <validValue name="MS">1</validValue>
    </enum>
    <composite name="Duration">
      <type name="value" primitiveType="int64"/>
      <ref name="unit" type="Unit"/>
      <type name="tag" primitiveType="char" length="2"/>
    </composite>
    <composite name="Window">
      <composite name="start">
        <type name="seconds" primitiveType="uint32"/>
      </composite>
      <ref name="length" type="Duration" offset="8"/>
    </composite>
  </types>
  <message name="Timer" id="1">
    <field name="window" id="1" type="Window"/>
    <group name="windows" id="2">
      <field name="window" id="3" type="Window"/>
    </group>
  </message>
</messageSchema>
"""


def test_nested_composites_with_refs_and_offsets_in_blocks_and_groups() -> None:
    schema = load_schema(NESTED)
    codec = schema["Timer"]
    window = {"start": {"seconds": 7}, "length": {"value": -5, "unit": 1, "tag": "ab"}}
    values = {"window": window, "windows": [{"window": window}, {"window": {**window, "start": {"seconds": 8}}}]}
    data = codec.encode(values)
    assert codec.block_length == 8 + 8 + 1 + 2
    assert data[8:12] == (7).to_bytes(4, "little")
    assert data[16:24] == (-5).to_bytes(8, "little", signed=True)
    assert data[24:27] == b"\x01ab"
    assert codec.decode(data) == values
    dec = codec.decoder().wrap_and_check_header(data, 0)
    assert (dec.window.start.seconds, dec.window.length.unit, dec.window.length.tag) == (7, 1, "ab")
    assert [entry.window.start.seconds for entry in dec.windows()] == [7, 8]
