"""What a stream is given in files and counters: its settings, its log and its position counters.

Both halves of the conductor allocate them (the conductor for IPC publications,
its network half for UDP publications and images), so they live below both:
the network half takes a :class:`StreamAllocator` and never needs the conductor
for it.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.concurrent.system_counters import (
    SUBSCRIBER_POSITION_NAME,
    SUBSCRIBER_POSITION_TYPE_ID,
    allocate_stream_counter,
)
from driver.errors import ControlProtocolError, ErrorCode, InvalidChannelError
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.current_metadata import (
    LOG_TYPE_CONCURRENT_PUBLICATION,
    LOG_TYPE_EXCLUSIVE_PUBLICATION,
    CurrentLogMetadata,
    write_current_metadata,
)
from driver.logbuffer.log_buffers import LogBuffers
from driver.media.os_buffers import os_socket_buffer_lengths
from driver.uri import ChannelUri, parse_duration_ns, parse_size

if TYPE_CHECKING:
    from driver.config import DriverContext
    from driver.core.links import SubscriptionLink

__all__ = ["PublicationParams", "StreamAllocator", "int_param"]


class PublicationParams:
    """A publication's settings: its channel's parameters over the driver's defaults for that media."""

    __slots__ = ("initial_term_id", "linger_ns", "mtu", "session_id", "sparse", "start", "term_length")

    def __init__(self, uri: ChannelUri, ctx: DriverContext, is_exclusive: bool) -> None:
        is_ipc = uri.media == "ipc"
        self.term_length = int_param(
            uri, "term-length", ctx.effective_ipc_term_buffer_length if is_ipc else ctx.term_buffer_length
        )
        self.mtu = int_param(uri, "mtu", ctx.ipc_mtu_length if is_ipc else ctx.mtu_length)
        session = uri.get("session-id")
        self.session_id: int | None = int(session.removeprefix("tag:")) if session is not None else None
        linger = uri.get("linger")
        self.linger_ns = parse_duration_ns(linger) if linger is not None else ctx.publication_linger_timeout_ns
        sparse = uri.get("sparse")
        self.sparse = sparse == "true" if sparse is not None else ctx.term_buffer_sparse_file
        self.initial_term_id: int | None = None
        self.start: tuple[int, int] | None = None
        if uri.get("init-term-id") is not None:
            if not is_exclusive:
                raise ControlProtocolError(
                    ErrorCode.INVALID_CHANNEL, "init-term-id, term-id and term-offset need an exclusive publication"
                )
            self.initial_term_id = int_param(uri, "init-term-id", 0)
            self.start = (int_param(uri, "term-id", 0), int_param(uri, "term-offset", 0))
        lbd.check_term_length(self.term_length)
        max_message = lbd.compute_max_message_length(self.term_length)
        if self.mtu > max_message:
            raise InvalidChannelError(
                "mtu", self.mtu, f"must be <= max message length {max_message} for the term length"
            )


def int_param(uri: ChannelUri, name: str, default: int) -> int:
    """A channel's integer parameter (sizes may carry a unit), or ``default`` when absent."""
    value = uri.get(name)
    if value is None:
        return default
    return parse_size(value) if name in ("term-length", "mtu", "max-term-length") else int(value)


class StreamAllocator:
    """Creates publication logs and stream counters as the driver's generation writes them.

    ``is_current``: the driver speaks today's generation, whose logs carry extra
    metadata and whose counters record the client that owns them.
    """

    __slots__ = ("_ctx", "counters", "is_current", "publications_dir")

    def __init__(self, ctx: DriverContext, counters: CountersManager, *, is_current: bool) -> None:
        self._ctx = ctx
        self.counters = counters
        self.is_current = is_current
        self.publications_dir = os.path.join(ctx.aeron_dir, "publications")
        """Where publication logs go, each named by its registration id."""

    def stream_counter(
        self,
        name: str,
        type_id: int,
        registration_id: int,
        session_id: int,
        stream_id: int,
        channel: str,
        suffix: str = "",
        owner_id: int = 0,
    ) -> AtomicCounter:
        """``owner_id``: the client the counter belongs to, recorded in the current generation only."""
        counter_id = allocate_stream_counter(
            self.counters,
            name,
            type_id,
            registration_id,
            session_id,
            stream_id,
            channel,
            suffix,
            owner_id=owner_id if self.is_current else 0,
        )
        return AtomicCounter(self.counters.values_buffer, counter_id, self.counters)

    def subscriber_position(self, sub: SubscriptionLink, session_id: int, join_position: int) -> AtomicCounter:
        counter = self.stream_counter(
            SUBSCRIBER_POSITION_NAME,
            SUBSCRIBER_POSITION_TYPE_ID,
            sub.registration_id,
            session_id,
            sub.stream_id,
            sub.channel,
            f" @{join_position}",
            owner_id=sub.client.client_id,
        )
        counter.set_ordered(join_position)
        return counter

    def create_publication_log(
        self,
        registration_id: int,
        session_id: int,
        stream_id: int,
        initial_term_id: int,
        params: PublicationParams,
        current: CurrentLogMetadata | None = None,
    ) -> LogBuffers:
        """``current``: today's extra metadata, written only when the driver speaks the current generation."""
        path = f"{self.publications_dir}/{registration_id}.logbuffer"
        log = LogBuffers.create(path, params.term_length, self._ctx.file_page_size, sparse=params.sparse)
        try:
            if current is not None and self.is_current:
                write_current_metadata(log.metadata, current)
            lbd.initialize_publication_metadata(
                log.metadata,
                session_id=session_id,
                stream_id=stream_id,
                initial_term_id=initial_term_id,
                mtu_length=params.mtu,
                term_length=params.term_length,
                page_size=self._ctx.file_page_size,
                correlation_id=registration_id,
                term_id=params.start[0] if params.start else None,
                term_offset=params.start[1] if params.start else 0,
            )
        except BaseException:
            log.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        return log

    def publication_metadata(
        self,
        params: PublicationParams,
        is_exclusive: bool,
        window_length: int,
        *,
        group: bool = False,
        socket_sndbuf_length: int = 0,
        socket_rcvbuf_length: int = 0,
    ) -> CurrentLogMetadata:
        """Today's extra metadata for a publication's log, as the C driver fills it."""
        os_lengths = os_socket_buffer_lengths()
        return CurrentLogMetadata(
            log_type=LOG_TYPE_EXCLUSIVE_PUBLICATION if is_exclusive else LOG_TYPE_CONCURRENT_PUBLICATION,
            publication_window_length=window_length,
            socket_sndbuf_length=socket_sndbuf_length,
            os_default_socket_sndbuf_length=os_lengths[0],
            os_max_socket_sndbuf_length=os_lengths[1],
            socket_rcvbuf_length=socket_rcvbuf_length,
            os_default_socket_rcvbuf_length=os_lengths[2],
            os_max_socket_rcvbuf_length=os_lengths[3],
            linger_timeout_ns=params.linger_ns,
            group=group,
            sparse=params.sparse,
            signal_eos=True,
            spies_simulate_connection=self._ctx.spies_simulate_connection,
        )
