"""Aeron Archive's SBE codecs, built from Aeron's own schema files (``schemas/``, see its README) at import time.

Two generations of the control protocol schema (id 101) matter:

- :data:`LEGACY`: the schema as Aeron 1.15.1 ships it, version 0, 22 messages (``ConnectRequest``, ``SourceLocation``
  encoded as ``uint8``, the catalog header of that era). Aeron kept this layout up to schema version 2.
- :data:`CURRENT`: today's schema, version 14, 49 messages (``AuthConnectRequest``, keep-alive, bounded replay,
  replication, segment management, recording signals, archive id...). From version 3 (Aeron 1.22) ``SourceLocation`` is
  an ``int32``, so a message that carries it is laid out differently from the legacy one.

The mark file has its own schema (id 100): :data:`LEGACY_MARK` (version 0) and :data:`CURRENT_MARK` (version 2).

A peer's message is decoded by the generation its header's version belongs to (:func:`generation_for`); the
:class:`ArchiveDispatcher` does that and hands back the reused decoder of the right message, raising the typed
:mod:`driver.sbe` errors for a foreign schema id or an unknown template id.
"""

from __future__ import annotations

from driver.sbe import Dispatcher, MessageDecoder, MessageSchema, load_schema_resource

__all__ = [
    "ARCHIVE_SCHEMA_ID",
    "CURRENT",
    "CURRENT_MARK",
    "LEGACY",
    "LEGACY_MARK",
    "MARK_SCHEMA_ID",
    "SCHEMA_FILES",
    "SOURCE_LOCATION_INT32_VERSION",
    "ArchiveDispatcher",
    "generation_for",
]

SCHEMA_FILES: dict[str, str] = {
    "legacy": "schemas/aeron-1.15.1/aeron-archive-codecs.xml",
    "legacy-mark": "schemas/aeron-1.15.1/aeron-archive-mark-codecs.xml",
    "current": "schemas/aeron-current/aeron-archive-codecs.xml",
    "current-mark": "schemas/aeron-current/aeron-archive-mark-codecs.xml",
}
"""Resources of the ``driver.archive`` package holding Aeron's schema XML, by generation."""

LEGACY: MessageSchema = load_schema_resource("driver.archive", SCHEMA_FILES["legacy"])
CURRENT: MessageSchema = load_schema_resource("driver.archive", SCHEMA_FILES["current"])
LEGACY_MARK: MessageSchema = load_schema_resource("driver.archive", SCHEMA_FILES["legacy-mark"])
CURRENT_MARK: MessageSchema = load_schema_resource("driver.archive", SCHEMA_FILES["current-mark"])

ARCHIVE_SCHEMA_ID = LEGACY.id
MARK_SCHEMA_ID = LEGACY_MARK.id

SOURCE_LOCATION_INT32_VERSION = 3
"""The first schema version (Aeron 1.22.0) with ``SourceLocation`` as ``int32``; versions below share the legacy
layout."""


def generation_for(version: int, template_id: int) -> MessageSchema:
    """The schema generation that decodes a message sent with this header version and template id.

    Versions below :data:`SOURCE_LOCATION_INT32_VERSION` use the legacy layout for the messages the legacy schema
    has; anything else (a newer version, or a template only today's schema defines) uses :data:`CURRENT`, which reads
    an older acting version's missing fields as nulls. ``ConnectRequest`` exists only in the legacy schema.
    """
    if (version < SOURCE_LOCATION_INT32_VERSION and template_id in LEGACY.templates) or (
        template_id not in CURRENT.templates
    ):
        return LEGACY
    return CURRENT


class ArchiveDispatcher(Dispatcher):
    """Decodes any archive control/event/descriptor message of either generation with reused decoders.

    One per receiving loop. :meth:`wrap` returns the message's decoder, positioned on its body: check its
    ``TEMPLATE_ID`` (or ``NAME``) and ``SCHEMA_VERSION`` (0 = legacy) to know what it is. Raises
    :class:`SbeSchemaIdMismatchError`, :class:`SbeUnknownTemplateError` or :class:`SbeDecodeError` (their base):
    count and drop.
    """

    __slots__ = ("_current",)

    def __init__(self) -> None:
        super().__init__(LEGACY)  # the legacy decoders, and the header and schema id both generations share
        self._current = {tid: codec.decoder() for tid, codec in CURRENT.templates.items()}

    def _decoder_for(self, template_id: int, version: int) -> MessageDecoder | None:
        decoder = self._decoders.get(template_id) if version < SOURCE_LOCATION_INT32_VERSION else None
        return decoder or self._current.get(template_id) or self._decoders.get(template_id)
