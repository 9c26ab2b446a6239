"""One connection between two end points.

:mod:`~endpoint.connection.core`: its protocol without I/O (reassembly, opening, decoding, routing), with
:mod:`~endpoint.connection.liveness` (when the peer is dead, when to send a keepalive) and
:mod:`~endpoint.connection.sealing` (per-message AEAD); :mod:`~endpoint.connection.outbox`: every send and the
queue behind back pressure; :mod:`~endpoint.connection.peer`: the connection as the parts below it see it; and
:mod:`~endpoint.connection.shell`: :class:`~endpoint.connection.shell.Connection`, the asyncio shell over them;
:mod:`~endpoint.connection.session` (a buffered session's bookkeeping without I/O) and
:mod:`~endpoint.connection.buffered` (:class:`~endpoint.connection.buffered.Session`, its asyncio side).
"""
