"""The receiver agent: reads data from the receive endpoints and keeps every image moving.

Each duty cycle it takes a few commands from the conductor, polls each receive
endpoint (bounded per endpoint), and lets each image track its rebuild — loss
detection, NAKs and status messages. Elicited setups that got no answer, and
cooldowns after an image was removed, expire on the same cycle.

Past a few images a cycle tracks only those that got data, whose subscribers
moved (one native scan of their positions) or whose agenda deadline passed (a
status message due; every cycle while a gap is open); past a few endpoints,
only sockets with a datagram waiting are read. The status messages of quiet
images (rebuild complete, a static window) are sent by each endpoint's native
timer, so an idle image costs no Python call at all.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable

from driver.clock import NanoClock
from driver.concurrent._watches import PositionWatch
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter
from driver.core.agenda import Agenda, no_wake
from driver.core.command_queues import CommandQueue
from driver.core.publication_image import PublicationImage
from driver.media._net import (
    DatagramSocket,
    ImageJournal,
    ImageRoutes,
    ImageSlot,
    send_all_status_messages,
    slots_to_track,
)
from driver.media.endpoints import CONTROL_ELICIT_INTERVAL_NS, NEVER_NS, ReceiveChannelEndpoint
from driver.media.readiness import FEW_ENDPOINTS, ReadyEndpoints

__all__ = ["FEW_IMAGES", "IMAGE_JOURNAL_CAPACITY", "Receiver"]

FEW_IMAGES = 2
"""Up to this many images each is tracked every cycle (lowest latency, no bookkeeping)."""

IMAGE_JOURNAL_CAPACITY = 16_384
"""Image writes the receiver's journal holds: a reader further behind than this looks at every image once."""
PENDING_SETUP_TIMEOUT_NS = 1_000_000_000
IMAGE_COOLDOWN_NS = 5_000_000_000


STALL_NS_DEFAULT = 100_000_000
"""A gap between two of the receiver's reads of its sockets longer than this is a stall (its parks are far
shorter): the silence before it does not count towards an image's liveness timeout. (The driver uses a quarter
of its image liveness timeout when that is longer, so that a loaded machine's shorter hiccups do not keep
putting off the end of an image whose publisher did die.)"""


class Receiver:
    role_name = "receiver"

    def __init__(self, clock: NanoClock, commands: CommandQueue, stall_ns: int = STALL_NS_DEFAULT) -> None:
        self._clock = clock
        self.commands = commands
        self.endpoints: list[ReceiveChannelEndpoint] = []
        self.images: list[PublicationImage] = []
        self._next_expiry_ns = 0
        self._status_pairs: tuple[tuple[DatagramSocket, ImageRoutes], ...] = ()
        """Each endpoint's (socket, images): their quiet images' due status messages go in one native call."""
        self._next_elicit_ns = 0
        """The earliest of the endpoints' ``next_elicit_ns`` (0: look at them all at the next cycle)."""
        self.polled_ns = clock.nano_time()
        """When this receiver last read its sockets (the start of that duty cycle): the conductor judges an image's
        silence up to here, not up to its own now. After a stall of the whole process (a starved CPU, a stopped
        process) the conductor may run before the receiver has read what waited in the sockets meanwhile, and
        would otherwise take a live image for a dead one: a reliable stream would lose what it had not delivered
        and a new image join further on."""
        self.awake_since_ns = self.polled_ns
        """Start of the receiver's current run of duty cycles with no gap longer than ``stall_ns`` between two
        reads of its sockets: silence counts only from here. A publisher in the same stalled process (or host)
        could not send either, so a stall's silence is not the publisher's."""
        self._stall_ns = stall_ns
        self._agenda: Agenda[PublicationImage] = Agenda()
        self._ready = ReadyEndpoints[ReceiveChannelEndpoint]()
        self.sockets_version = 0
        """Changes whenever ``readable_sockets`` would answer differently."""
        self.image_journal = ImageJournal(IMAGE_JOURNAL_CAPACITY)
        """Each image written to (by its registration id), in order: a host polling many images of this driver on
        the receiver's thread looks at those alone (see ``endpoint.poller``)."""
        self.datagrams = 0
        """Datagrams read from the receive endpoints' sockets so far: only these (and gaps filled, see
        ``Loss gap fills``) put frames into images, so a host polling images knows nothing new came while this
        stays put."""
        # Every image's subscriber positions, their values at the last look, and whose they are. Images that
        # came or went are taken in one at a time at the next look (a storm of connects must not walk every
        # image per new one); the native watch is then made again from the kept list, in C.
        self._positions = PositionWatch([])
        self._positions_of: list[PublicationImage] = []
        self._position_entries: list[tuple[AtomicBuffer, int]] = []
        self._position_slots: list[ImageSlot] = []
        """The slot of each of ``_positions_of`` (for the native quiet test)."""
        self._positions_moved: dict[int, PublicationImage] = {}
        """Images (by ``id``) whose subscriber positions came, changed or went since the last look."""
        self._watched: set[PublicationImage] = set()
        """The images with entries in ``_positions_of``."""

    def on_start(self) -> None:
        pass

    def readable_sockets(self) -> list[socket.socket]:
        """What an idle park also waits on (data, setups and feedback arrive on these)."""
        return [endpoint.transport.socket for endpoint in self.endpoints]

    def do_work(self) -> int:
        now_ns = self._clock.nano_time()
        work = self.commands.drain()
        endpoints = self.endpoints
        if len(endpoints) > FEW_ENDPOINTS and self._ready.covers(len(endpoints)):
            endpoints = self._ready.ready()
        received = 0
        for endpoint in endpoints:
            received += endpoint.poll(now_ns)
        self.datagrams += received
        work += received
        if now_ns - self.polled_ns > self._stall_ns:
            self.awake_since_ns = now_ns
        self.polled_ns = now_ns
        if now_ns >= self._next_elicit_ns:
            self._elicit_due(now_ns)
        work += send_all_status_messages(self._status_pairs, now_ns)  # quiet images' timers (native)
        if len(self.images) > FEW_IMAGES:
            work += self._track_due(now_ns)
        else:
            for image in self.images:
                work += image.track_rebuild(now_ns)
        if now_ns >= self._next_expiry_ns:
            self._next_expiry_ns = now_ns + CONTROL_ELICIT_INTERVAL_NS  # also how often to ask for SETUPs
            for endpoint in self.endpoints:
                endpoint.expire_pending(now_ns, PENDING_SETUP_TIMEOUT_NS)
                endpoint.elicit_from_control(now_ns, PENDING_SETUP_TIMEOUT_NS)
            self._next_elicit_ns = 0  # (that may have asked for some)
        return work

    def _elicit_due(self, now_ns: int) -> None:
        """The endpoints' due SETUP elicits (see ``ReceiveChannelEndpoint.elicit_waiting``); notes the next."""
        upcoming = NEVER_NS
        for endpoint in self.endpoints:
            if now_ns >= endpoint.next_elicit_ns:
                endpoint.elicit_waiting(now_ns)
            upcoming = min(upcoming, endpoint.next_elicit_ns)
        self._next_elicit_ns = upcoming

    def _endpoints_changed(self) -> None:
        self.sockets_version += 1
        self._status_pairs = tuple((e.transport.datagram_socket, e.routes) for e in self.endpoints)

    def _track_due(self, now_ns: int) -> int:
        agenda = self._agenda
        owners = self._positions_of
        changed = self._positions.changed()
        if changed:
            # Only the images whose tracking has work (a subscriber past its status-message trigger, a gap, an SM
            # due): a subscriber reading within its window is the common case, and costs no visit here.
            for index in slots_to_track(self._position_slots, changed, now_ns):  # (a removed owner is not woken)
                agenda.wake(owners[index])
        if self._positions_moved:  # images came or went: watch the new set (added ones are due already)
            self._take_moved_positions()
        work = 0
        items = agenda.items
        for index in agenda.due(now_ns):
            image = items[index]
            work += image.track_rebuild(now_ns)
            agenda.schedule(index, image.next_track_ns())
        return work

    def _take_moved_positions(self) -> None:
        """The positions of the images named in ``_positions_moved`` out of the watch, then those still in the
        agenda back in at its end: each costs its own entries (and a scan of the list in C when it had some).
        Only new images (a connect storm's): the watch grows by theirs; else it is made again."""
        moved = self._positions_moved
        self._positions_moved = {}
        owners = self._positions_of
        entries = self._position_entries
        slots = self._position_slots
        watched = self._watched
        items = self._agenda.items
        start = len(entries)  # where the new entries begin, unless an image's had to come out
        rebuild = False
        for image in moved.values():
            if image in watched:
                watched.discard(image)
                rebuild = True
                while True:
                    try:
                        index = owners.index(image)
                    except ValueError:
                        break
                    del owners[index]
                    del entries[index]
                    del slots[index]
            index = image.agenda_index
            if 0 <= index < len(items) and items[index] is image and image.subscriber_positions:
                watched.add(image)
                for counter in image.subscriber_positions:
                    owners.append(image)
                    entries.append(counter.location())
                    slots.append(image.slot)
        if rebuild:
            self._positions = PositionWatch(entries)
        elif start < len(entries):
            self._positions.extend(entries[start:])

    def on_close(self) -> None:
        self._ready.close()

    # -- commands from the conductor --------------------------------------------------------------

    def on_add_subscription(
        self, endpoint: ReceiveChannelEndpoint, stream_id: int, session_id: int | None = None
    ) -> None:
        if endpoint not in self.endpoints:
            self.endpoints.append(endpoint)
            self._ready.add(endpoint)
            self._endpoints_changed()
        endpoint.add_stream(stream_id, session_id, self._clock.nano_time())
        self._next_elicit_ns = min(self._next_elicit_ns, endpoint.next_elicit_ns)  # (it may ask for SETUPs)
        endpoint.claim_setups(stream_id, self._clock.nano_time())

    def on_remove_subscription(
        self, endpoint: ReceiveChannelEndpoint, stream_id: int, session_id: int | None = None
    ) -> None:
        endpoint.remove_stream(stream_id, session_id)

    def on_new_image(self, endpoint: ReceiveChannelEndpoint, image: PublicationImage) -> None:
        key = (image.session_id, image.stream_id)
        endpoint.pending_setups.pop(key, None)
        endpoint.add_image(key, image)
        self.images.append(image)
        self._agenda.add(image)
        image.wake = functools.partial(self._agenda.wake, image)
        image.slot.set_journal(self.image_journal, image.correlation_id)
        self._positions_moved[id(image)] = image
        image.send_status_message(image.join_position, image.window, self._clock.nano_time())

    def on_image_creation_failed(self, endpoint: ReceiveChannelEndpoint, session_id: int, stream_id: int) -> None:
        endpoint.pending_setups.pop((session_id, stream_id), None)

    def on_update_subscribers(
        self, image: PublicationImage, positions: tuple[AtomicCounter, ...], done: Callable[[], object]
    ) -> None:
        image.set_subscriber_positions(positions)
        self._positions_moved[id(image)] = image
        self._agenda.wake(image)
        done()

    def on_remove_image(
        self, endpoint: ReceiveChannelEndpoint, image: PublicationImage, done: Callable[[], object]
    ) -> None:
        key = (image.session_id, image.stream_id)
        endpoint.remove_image(key, image)
        endpoint.cooldowns[key] = self._clock.nano_time() + IMAGE_COOLDOWN_NS
        if image in self.images:
            self.images.remove(image)
        self._agenda.remove(image)
        image.wake = no_wake
        image.slot.set_journal(None, 0)
        self._positions_moved[id(image)] = image
        done()

    def on_close_endpoint(self, endpoint: ReceiveChannelEndpoint, done: Callable[[], object]) -> None:
        """Let go of ``endpoint``; ``done`` runs whatever happens (the conductor reads no client command until
        the endpoint is closed)."""
        try:
            if endpoint in self.endpoints:
                self.endpoints.remove(endpoint)
                self._ready.remove(endpoint)
                self._endpoints_changed()
        finally:
            done()
