"""What the conductor keeps per client: the client itself and its links to resources.

Every resource a client asks for is held through a link owned by that client,
so a client that closes or times out releases exactly what it held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver.concurrent.counters import AtomicCounter

if TYPE_CHECKING:
    from driver.core.ipc_publication import IpcPublication
    from driver.core.network_publication import NetworkPublication
    from driver.core.publication_image import PublicationImage
    from driver.media.endpoints import ReceiveChannelEndpoint

__all__ = ["ClientSession", "CounterLink", "PublicationLink", "SubscriberPosition", "SubscriptionLink"]


class ClientSession:
    """A client known to the driver, alive while its keepalives arrive.

    1.15.1 clients send CLIENT_KEEPALIVE; today's clients instead find their
    heartbeat counter (type 11, key = client id) and stamp it with epoch ms, so
    liveness is the later of the two.
    """

    __slots__ = ("client_id", "heartbeat", "liveness_timeout_ms", "time_of_last_keepalive_ms")

    def __init__(self, client_id: int, liveness_timeout_ms: int, now_ms: int, heartbeat: AtomicCounter) -> None:
        self.client_id = client_id
        self.liveness_timeout_ms = max(1, liveness_timeout_ms)
        self.heartbeat = heartbeat
        self.on_keepalive(now_ms)

    def on_keepalive(self, now_ms: int) -> None:
        self.time_of_last_keepalive_ms = now_ms
        self.heartbeat.set_ordered(now_ms)

    def has_timed_out(self, now_ms: int) -> bool:
        last = self.time_of_last_keepalive_ms
        if now_ms <= last + self.liveness_timeout_ms:
            return False
        stamped = self.heartbeat.get_volatile()
        if stamped > last:
            self.time_of_last_keepalive_ms = last = stamped
        return now_ms > last + self.liveness_timeout_ms

    def close(self) -> None:
        self.heartbeat.close()


class PublicationLink:
    __slots__ = ("client", "publication", "registration_id")

    def __init__(
        self, registration_id: int, client: ClientSession, publication: IpcPublication | NetworkPublication
    ) -> None:
        self.registration_id = registration_id
        self.client = client
        self.publication = publication


class SubscriptionLink:
    """A client's subscription to a channel and stream, and its positions in matching logs."""

    __slots__ = (
        "channel",
        "client",
        "endpoint",
        "evict_silent",
        "max_images",
        "max_images_per_source",
        "max_term_length",
        "positions",
        "registration_id",
        "reliable",
        "session_id",
        "sparse",
        "spied_channel",
        "stream_id",
    )

    def __init__(
        self,
        registration_id: int,
        client: ClientSession,
        channel: str,
        stream_id: int,
        session_id: int | None,
        *,
        max_term_length: int = 1 << 30,
        max_images: int = 1 << 31,
        max_images_per_source: int = 1 << 31,
        sparse: bool = False,
        evict_silent: bool = False,
        reliable: bool = True,
        spied_channel: str | None = None,
    ) -> None:
        self.registration_id = registration_id
        self.client = client
        self.channel = channel
        self.stream_id = stream_id
        self.session_id = session_id
        self.positions: dict[int, SubscriberPosition] = {}
        self.endpoint: ReceiveChannelEndpoint | None = None  # network subscriptions only
        # Network subscriptions: what a publisher's SETUP may make this subscription hold.
        self.max_term_length = max_term_length
        self.max_images = max_images
        self.max_images_per_source = max_images_per_source
        self.sparse = sparse
        """``sparse=true`` on the channel: its images' logs are sparse whatever their length."""
        self.evict_silent = evict_silent
        """``evict-silent=true``: at an image limit, an image silent for a while gives way to a new one (a flood
        of SETUPs that never send evicts itself instead of locking live publishers out)."""
        self.reliable = reliable
        """``reliable=false`` on the channel: its images pad over loss instead of asking for it again (per
        subscription, as in Aeron: one endpoint can carry reliable and unreliable streams side by side)."""
        self.spied_channel = spied_channel
        """A spy (``aeron-spy:``): the canonical form of the UDP channel whose local publications it reads."""

    @property
    def is_spy(self) -> bool:
        return self.spied_channel is not None

    def matches(self, publication: IpcPublication) -> bool:
        return (
            self.endpoint is None
            and self.spied_channel is None
            and publication.stream_id == self.stream_id
            and (self.session_id is None or self.session_id == publication.session_id)
        )

    def matches_spied(self, publication: NetworkPublication, canonical_form: str) -> bool:
        """A spy's match: the publication's stream (and session) on the spied channel (``canonical_form``: the
        publication's endpoint's)."""
        return (
            self.spied_channel == canonical_form
            and publication.stream_id == self.stream_id
            and (self.session_id is None or self.session_id == publication.session_id)
        )

    def is_linked(self, publication: IpcPublication | NetworkPublication) -> bool:
        return publication.registration_id in self.positions


class SubscriberPosition:
    """One subscription's read position in one publication's log (an IPC publication's, an image's, or for a spy
    a network publication's)."""

    __slots__ = ("counter", "publication", "subscription")

    def __init__(
        self,
        subscription: SubscriptionLink,
        publication: IpcPublication | PublicationImage | NetworkPublication,
        counter: AtomicCounter,
    ) -> None:
        self.subscription = subscription
        self.publication = publication
        self.counter = counter


class CounterLink:
    __slots__ = ("client", "counter", "registration_id")

    def __init__(self, registration_id: int, client: ClientSession, counter: AtomicCounter) -> None:
        self.registration_id = registration_id
        self.client = client
        self.counter = counter
