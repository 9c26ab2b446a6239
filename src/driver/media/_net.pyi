from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Buffer

from driver.concurrent.atomic_buffer import AtomicBuffer

class DatagramSocket:
    """Non-raising, GIL-keeping datagram I/O on a non-blocking socket it does not own."""

    no_segmentation: bool
    """``send_publications`` sends datagrams one by one (set once the kernel refuses UDP_SEGMENT on this socket)."""
    def __init__(self, fd: int, family: int) -> None: ...
    @property
    def fd(self) -> int: ...
    @property
    def segmented_sends(self) -> int:
        """Messages of several datagrams ``send_publications`` handed the kernel to cut (UDP_SEGMENT)."""
    def recvfrom_into(self, buffer: Buffer, /) -> tuple[int, tuple[str, int]] | None:
        """(length, address) of one datagram, or None when nothing is waiting; OSError otherwise.

        IPv6 sockets give ``(host, port, flowinfo, scope_id)`` addresses.
        """
    def sendto(self, data: Buffer, address: tuple[str, int] | tuple[str, int, int, int], /) -> int:
        """Bytes sent; -1 when the kernel would block; -2 when the host is not numeric; OSError otherwise."""
    def detach(self) -> None:
        """Forget the descriptor; later calls raise OSError(EBADF)."""
    def receive_batch(
        self,
        routes: ImageRoutes,
        buffer: Buffer,
        now_ns: int,
        limit: int,
        handler: Callable[[int, tuple[str, int]], object],
        /,
    ) -> tuple[int, int]:
        """(datagrams, bytes) read, up to ``limit``, 16 per recvmmsg: data for a routed image from its source
        is checked (malformed ones counted) and inserted; any other datagram is copied into ``buffer`` and given to
        ``handler(length, address)``. OSError for a failure other than nothing waiting (or ECONNREFUSED)."""
    def send_status_messages(self, routes: ImageRoutes, now_ns: int, /) -> int:
        """Status messages sent: those due of the quiet images in ``routes`` timed natively (sendmmsg)."""

class ImageJournal:
    """The images a receiver wrote data into, in order, for readers that look only at those."""

    def __init__(self, capacity: int) -> None: ...
    @property
    def written(self) -> int: ...
    def append(self, id: int, /) -> None: ...
    def since(self, count: int, /) -> tuple[int, list[int] | None]: ...

class ImageSlot:
    """The receive side's state of one image: what inserting a datagram needs, shared with the batched receive."""

    def __init__(
        self,
        *,
        terms: Sequence[AtomicBuffer],
        metadata: AtomicBuffer,
        eos_offset: int,
        session_id: int,
        stream_id: int,
        initial_term_id: int,
        position_bits: int,
        hwm_position: tuple[AtomicBuffer, int],
        rebuild_position: tuple[AtomicBuffer, int],
        heartbeats: tuple[AtomicBuffer, int],
        under_runs: tuple[AtomicBuffer, int],
        over_runs: tuple[AtomicBuffer, int],
        position: int,
        window_limit: int,
        now_ns: int,
        status_messages_sent: tuple[AtomicBuffer, int],
        status_message_timeout_ns: int,
        receiver_id: int,
    ) -> None: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def hwm(self) -> int: ...
    rebuild: int
    last_sm_position: int
    window_limit: int
    @property
    def time_of_last_packet_ns(self) -> int: ...
    @property
    def end_of_stream(self) -> bool: ...
    @property
    def timed_natively(self) -> bool:
        """Its status-message timer runs natively."""
    @property
    def clean_position(self) -> int: ...
    sm_due_ns: int
    sm_trigger_position: int
    time_of_last_sm_ns: int
    window: int
    native_sm: bool
    wake: Callable[[], object] | None
    def insert(self, term_id: int, term_offset: int, packet: Buffer, length: int, now_ns: int, /) -> int:
        """Bytes taken of a checked datagram (0 outside the window, counted)."""
    def set_source(self, address: tuple[str, int] | tuple[str, int, int, int], /) -> None:
        """Where the image's datagrams come from: only those take the batch's native path."""
    def set_control(self, address: tuple[str, int] | tuple[str, int, int, int], /) -> None:
        """Where its status messages go."""
    def set_subscribers(self, locations: Sequence[tuple[AtomicBuffer, int]], /) -> None:
        """The subscribers' position counters."""
    def set_journal(self, journal: ImageJournal | None, id: int, /) -> None: ...
    def note_written(self) -> None: ...
    def clean_to(self, position: int, /) -> None:
        """Zero the term behind ``position``."""

class ImageRoutes:
    """The images a receive endpoint's batch inserts into, by (session, stream)."""

    def __init__(
        self, invalid_packets: tuple[AtomicBuffer, int], short_sends: tuple[AtomicBuffer, int], status_messages: bool
    ) -> None: ...
    def add(self, slot: ImageSlot, /) -> None: ...
    def remove(self, slot: ImageSlot, /) -> None: ...
    def __len__(self) -> int: ...
    feedback: FeedbackRoutes | None
    """A send endpoint's publications: the batch applies their common status messages natively."""

FEEDBACK_NONE: int
FEEDBACK_MAX_POSITION: int
FEEDBACK_MIN: int

class FlowReceiver:
    """A receiver min multicast flow control knows (shared with the native status-message path)."""

    def __init__(self, last_position: int, limit: int, time_of_last_sm_ns: int) -> None: ...
    last_position: int
    limit: int
    time_of_last_sm_ns: int

class FeedbackSlot:
    """What a status message changes in one publication, for the Python and the native path alike."""

    def __init__(self, kind: int, group_min_size: int = 0) -> None: ...
    @property
    def kind(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def group_min_size(self) -> int: ...
    @property
    def receivers(self) -> dict[int, FlowReceiver] | None:
        """Min flow control's receivers by id (None for other kinds)."""
    last_sm_ns: int
    last_position: int
    flow_sm_ns: int
    native: bool
    """The next plain status message may be applied natively (set by the publication)."""
    has_receivers: bool
    """The publication's: status messages are applied natively only while it holds."""
    end_of_stream: bool
    """The publication's: while it holds, every status message goes through Python (it wakes the sender)."""
    def bind(
        self,
        session_id: int,
        stream_id: int,
        initial_term_id: int,
        position_bits: int,
        sender_limit: tuple[AtomicBuffer, int],
        connected: tuple[AtomicBuffer, int],
        /,
    ) -> None: ...

class FeedbackRoutes:
    """A send endpoint's publications by (session, stream), for the native status-message path."""

    def __init__(
        self, status_messages: tuple[AtomicBuffer, int], shared_destinations: dict[Any, int] | None = None
    ) -> None: ...
    def add(self, slot: FeedbackSlot, destinations: dict[Any, int] | None = None, /) -> None: ...
    def remove(self, slot: FeedbackSlot, /) -> None: ...
    def __len__(self) -> int: ...

QUIET_RESERVED_VALUE: int
"""The reserved value that asks for no tail probe (``driver.logbuffer.frame.QUIET_RESERVED_VALUE``)."""

class SendSlot:
    """The send-side state of one network publication, shared by its Python path and the native batched send."""

    def __init__(
        self,
        *,
        terms: Sequence[AtomicBuffer],
        session_id: int,
        stream_id: int,
        initial_term_id: int,
        position_bits: int,
        mtu: int,
        sender_position: tuple[AtomicBuffer, int],
        sender_limit: tuple[AtomicBuffer, int],
        bytes_sent: tuple[AtomicBuffer, int],
        heartbeats_sent: tuple[AtomicBuffer, int],
        short_sends: tuple[AtomicBuffer, int],
        sender_flow_control_limits: tuple[AtomicBuffer, int],
        heartbeat_interval_ns: int,
        last_send_ns: int,
    ) -> None: ...
    last_send_ns: int
    track_limits: bool
    python: bool
    heartbeat_interval_ns: int
    probe_ns: int
    """A tail probe: one heartbeat this long after data, if shorter than the interval (0: none)."""
    probe_pending: bool
    """Data went since the last heartbeat."""
    @property
    def bound(self) -> bool:
        """A socket and destinations are given: the native step may send for it."""
    def bind(
        self,
        socket: DatagramSocket | None,
        destinations: list[tuple[str, int]] | list[tuple[str, int, int, int]] | None,
        all_destinations: bool,
        /,
    ) -> None:
        """Send natively through ``socket`` to the address tuples in ``destinations`` (the very list its owner
        changes in place); with ``all_destinations`` a datagram counts as sent only when every destination took it.
        ``bind(None, None, False)`` unbinds."""

def send_publications(
    slots: list[SendSlot], due: list[int], start: int, now_ns: int, deadlines: Buffer, /
) -> tuple[int, list[int] | None]:
    """(bytes sent, indices the Python path must visit or None): the due publications' data up to their sender
    limits, or due heartbeats, in sendmmsg batches per socket; positions, times, counters and deadlines updated."""

def send_all_status_messages(pairs: tuple[tuple[DatagramSocket, ImageRoutes], ...], now_ns: int, /) -> int:
    """``DatagramSocket.send_status_messages`` of each (socket, routes) in one call: status messages sent."""

def slots_to_track(slots: list[ImageSlot], indices: list[int], now_ns: int, /) -> list[int]:
    """Of ``indices`` into ``slots``, those whose image's tracking has something to do (the quiet test of
    ``PublicationImage.track_rebuild`` fails): a subscriber that moved within its window needs no visit."""
