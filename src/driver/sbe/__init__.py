"""Simple Binary Encoding (SBE 1.0) in pure Python, driven by a schema's XML at import time.

No code generator: :func:`load_schema` reads the XML once (cached) and builds, per message, a decoder class and an
encoder class whose fields are properties over precomputed :class:`struct.Struct` objects and offsets. They are
flyweights, as in Aeron and Agrona: one instance is re-``wrap``-ped over each message in a buffer, and reading a
field allocates nothing but the value.

Loading::

    schema = load_schema(xml_text)                   # or load_schema_resource("driver.archive", "schemas/x.xml")
    schema.id, schema.version, schema.header_length  # the messageSchema attributes; 8 for the usual header
    codec = schema["ReplayRequest"]                  # a MessageCodec; schema.templates[6] is the same
    codec.template_id, codec.block_length, codec.null_value("replayToken")
    schema.enums["SourceLocation"].LOCAL             # an IntEnum per <enum>, an IntFlag per <set>

Names: fields, groups and var data keep their schema names in snake case (``replayStreamId`` ->
``replay_stream_id``); a name that would shadow the API below gets a trailing ``_``.

Encoding (an encoder is reusable; make one per sender)::

    enc = codec.encoder().wrap_and_apply_header(buffer, offset)  # bytearray / memoryview / AtomicBuffer
    enc.control_session_id = 1                                    # fields: assign, any order
    enc.replay_stream_id = 101
    entries = enc.snapshots_count(2)                              # groups: count, then next() per entry
    entries.next().log_position = 7
    entries.next().log_position = 9
    enc.put_replay_channel("aeron:ipc")                           # var data: put_<name>(str | bytes), in order
    total = enc.HEADER_LENGTH + enc.encoded_length                # encoded_length excludes the header

Decoding::

    dec = codec.decoder().wrap(buffer, offset, acting_block_length, acting_version)  # body, header already read
    dec = codec.decoder().wrap_and_check_header(buffer, offset)   # reads and checks the header itself
    dec.replay_stream_id                                          # fields: properties
    for entry in dec.snapshots(): entry.log_position              # groups: call, iterate, in order
    dec.replay_channel()                                          # var data: call, in order (str or bytes)
    dec.replay_channel_length(), dec.skip_replay_channel(), dec.replay_channel_bytes()
    dec.encoded_length                                            # body bytes read so far (limit - offset)

All fixed fields at once (one ``unpack_from``/``pack_into`` over a block of numbers; field by field otherwise),
in the order of the class's ``FIELD_NAMES`` (constants aside)::

    dec.read_fields()                       # -> (control_session_id, correlation_id, ..., replay_stream_id)
    enc.write_fields(1, 2, 3, 0, -1, 101)   # pad bytes between fields are written as zeros

Buffers: ``bytes`` (decode only), ``bytearray``, a ``memoryview`` of bytes (format ``B``), or an object with
``capacity`` and ``view(index, length)`` such as the driver's ``AtomicBuffer``.

Dispatch by template id: ``d = schema.dispatcher(); dec = d.wrap(buffer, offset)`` returns the reused decoder of
whatever message is there (``dec.TEMPLATE_ID``, ``dec.NAME``); another schema's id raises
:class:`SbeSchemaIdMismatchError`, an unknown template :class:`SbeUnknownTemplateError`, short or inconsistent bytes
:class:`SbeDecodeError` (the base of both): count and drop. ``schema.read_header`` / ``write_header`` do the
header alone.

Versioning, as SBE prescribes: a decoder skips a longer block (a newer peer's) to find its groups and var data, and
a field, group or var data whose ``sinceVersion`` is newer than the acting version reads as its null value (0 entries,
empty). Optional fields read as their raw null value (``codec.nulls``); assigning ``None`` writes it. Enum and set
fields read and write plain ints (compare with the IntEnum), so an unknown value from a newer peer is no error.
Constant fields are read-only class-level values.

Slow generic paths for tests, tools and the catalog: ``codec.encode(values) -> bytes``, ``codec.decode(buffer)``,
``dec.to_dict()``, ``enc.encode(values)``, ``schema.decode(buffer) -> (codec, values)``; values by Python name,
groups as lists of dicts.

Class attributes of every message decoder/encoder: ``NAME``, ``TEMPLATE_ID``, ``BLOCK_LENGTH``, ``SCHEMA_ID``,
``SCHEMA_VERSION``, ``SINCE_VERSION``, ``HEADER_LENGTH``. Sans-IO and pure: no clock, no I/O but reading a
schema file.
"""

from __future__ import annotations

from driver.sbe.codec import (
    Dispatcher,
    MessageCodec,
    MessageHeader,
    MessageSchema,
    load_schema,
    load_schema_resource,
)
from driver.sbe.errors import (
    SbeDecodeError,
    SbeEncodeError,
    SbeError,
    SbeSchemaError,
    SbeSchemaIdMismatchError,
    SbeUnknownTemplateError,
)
from driver.sbe.flyweight import (
    CompositeDecoder,
    CompositeEncoder,
    GroupDecoder,
    GroupEncoder,
    MessageDecoder,
    MessageEncoder,
)
from driver.sbe.schema import parse_schema, snake_case

__all__ = [
    "CompositeDecoder",
    "CompositeEncoder",
    "Dispatcher",
    "GroupDecoder",
    "GroupEncoder",
    "MessageCodec",
    "MessageDecoder",
    "MessageEncoder",
    "MessageHeader",
    "MessageSchema",
    "SbeDecodeError",
    "SbeEncodeError",
    "SbeError",
    "SbeSchemaError",
    "SbeSchemaIdMismatchError",
    "SbeUnknownTemplateError",
    "load_schema",
    "load_schema_resource",
    "parse_schema",
    "snake_case",
]
