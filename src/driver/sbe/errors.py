"""Typed errors of the SBE codec layer.

Two families: a schema that cannot be turned into codecs (raised once, at import time, by whoever loads it) and
bytes that cannot be decoded or values that cannot be encoded (raised on the data path). A receiver catches
:class:`SbeDecodeError` at its one decode boundary, counts the message and drops it; the two subclasses for an
unknown template id and a foreign schema id let it count those apart, as SBE expects a peer to skip them.
"""

from __future__ import annotations

from driver.errors import DriverError

__all__ = [
    "SbeDecodeError",
    "SbeEncodeError",
    "SbeError",
    "SbeSchemaError",
    "SbeSchemaIdMismatchError",
    "SbeUnknownTemplateError",
]


class SbeError(DriverError):
    """Base of every error the SBE codecs raise."""


class SbeSchemaError(SbeError, ValueError):
    """The schema XML is malformed or uses something this codec does not support; the message names the element."""


class SbeDecodeError(SbeError, ValueError):
    """The bytes are not a message of this schema: truncated, a length past the buffer, a block too short."""


class SbeUnknownTemplateError(SbeDecodeError):
    """The header names a template id the schema does not define (a newer peer's message): skip it."""

    def __init__(self, template_id: int, schema_id: int, version: int) -> None:
        super().__init__(f"unknown SBE template id {template_id} (schema {schema_id}, version {version})")
        self.template_id = template_id
        self.schema_id = schema_id
        self.version = version


class SbeSchemaIdMismatchError(SbeDecodeError):
    """The header carries another schema's id: the message belongs to a different protocol."""

    def __init__(self, expected: int, actual: int, template_id: int) -> None:
        super().__init__(f"SBE schema id {actual} where {expected} was expected (template id {template_id})")
        self.expected = expected
        self.actual = actual
        self.template_id = template_id


class SbeEncodeError(SbeError, ValueError):
    """A value does not fit its field (range, length, encoding) or the message does not fit the buffer."""
