"""Channel URIs and waits shared by the server and client handshakes."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import time
import weakref
from collections.abc import Callable

from driver.client.aeron import Aeron
from driver.client.aio import PollBackoff
from driver.client.publication import ExclusivePublication, Publication
from driver.client.subscription import Subscription

__all__ = [
    "add_pair",
    "bracket",
    "data_channel",
    "free_udp_port",
    "host_of",
    "is_local_host",
    "local_address_towards",
    "reply_channel",
    "udp_channel",
    "wait_connected",
    "wait_image",
]

_YIELD_WINDOW_S = 0.001
"""Handshake waits keep yielding this long before napping: over IPC the answer is usually there by then."""
_DRIVE_EVERY_NS = 100_000
"""Waiters run an in-process driver at most this often between them: a storm of connects has hundreds of waits
polling at once, and each running a whole duty cycle on every poll cost ten times the work the waits needed."""
_PATIENT_AFTER_S = 0.05
_PATIENT_SLEEP_S = 0.005
"""A wait not over within ``_PATIENT_AFTER_S`` (the peer is far or busy, or a storm's clients queue for the
server's images) polls at most every ``_PATIENT_SLEEP_S``: hundreds of waits polling every millisecond were
most of a storm's client CPU."""
_driven: weakref.WeakKeyDictionary[Aeron, int] = weakref.WeakKeyDictionary()
_serviced: weakref.WeakKeyDictionary[Aeron, int] = weakref.WeakKeyDictionary()


def _drive(aeron: Aeron, conductor: bool = False) -> None:
    """One duty cycle of ``aeron``'s INVOKER-mode driver (and, with ``conductor``, of its client conductor),
    each unless a waiter ran one within ``_DRIVE_EVERY_NS``."""
    now_ns = time.monotonic_ns()
    if now_ns - _driven.get(aeron, 0) >= _DRIVE_EVERY_NS:
        _driven[aeron] = now_ns
        aeron.invoke_driver()
    if conductor and now_ns - _serviced.get(aeron, 0) >= _DRIVE_EVERY_NS:
        _serviced[aeron] = now_ns
        aeron.conductor.do_work()


def bracket(host: str) -> str:
    """IPv6 literals go in brackets inside an Aeron endpoint."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def udp_channel(
    endpoint: str,
    *,
    term_length: int | None = None,
    mtu: int | None = None,
    max_term_length: int | None = None,
    handshake: bool = False,
    control: str | None = None,
    session_id: int | None = None,
    max_images_per_source: int | None = None,
) -> str:
    """``max_term_length`` (subscriptions): the longest term a publisher may make the driver hold an image of;
    a subscription asks only for what its peers use, so a forged SETUP cannot make it map more. ``handshake``
    (subscriptions of handshake streams, which anyone may send to): sparse images, and at the image limits the
    longest-silent image gives way, so forged SETUPs that never send cost a page each and evict each other.
    ``control`` (subscriptions): the server's control address, which our status messages (from the socket that
    receives) go to, teaching the server where we are, through a NAT too. ``session_id``: the session the stream
    is (publications) or is from (subscriptions). ``max_images_per_source`` (subscriptions): images the driver holds
    from one address (at most its own ceiling)."""
    params = [f"endpoint={endpoint}"]
    if control is not None:
        params.append(f"control={control}")
    if session_id is not None:
        params.append(f"session-id={session_id}")
    if term_length is not None:
        params.append(f"term-length={term_length}")
    if mtu is not None:
        params.append(f"mtu={mtu}")
    if max_term_length is not None:
        params.append(f"max-term-length={max_term_length}")
    if max_images_per_source is not None:
        params.append(f"max-images-per-source={max_images_per_source}")
    if handshake:
        params += ["sparse=true", "evict-silent=true"]
    return "aeron:udp?" + "|".join(params)


def data_channel(
    endpoint: str | None,
    session_id: int,
    term_length: int | None,
    mtu: int | None,
    *,
    max_term_length: int | None = None,
    reliable: bool = True,
    control: str | None = None,
    heartbeat_interval: float | None = None,
    tail_probe: float | None = None,
) -> str:
    """A connection's stream: IPC when ``endpoint`` is None, else UDP to/at ``endpoint``; tagged with its session.
    ``max_term_length``, ``control``: as for :func:`udp_channel` (UDP subscriptions); ``reliable=False`` (UDP
    subscriptions): loss is padded over, not asked for again. ``heartbeat_interval`` (UDP publications, seconds):
    how often the driver heartbeats the stream while it is idle; ``tail_probe`` (reliable UDP publications,
    seconds): one heartbeat that long after data."""
    params = [f"session-id={session_id}"]
    if endpoint is not None:
        params.insert(0, f"endpoint={endpoint}")
        if control is not None:
            params.insert(1, f"control={control}")
    if term_length is not None:
        params.append(f"term-length={term_length}")
    if mtu is not None:
        params.append(f"mtu={mtu}")
    if max_term_length is not None and endpoint is not None:
        params.append(f"max-term-length={max_term_length}")
    if not reliable and endpoint is not None:
        params.append("reliable=false")
    if endpoint is not None:
        params += _heartbeat_params(heartbeat_interval, tail_probe)
    return ("aeron:ipc?" if endpoint is None else "aeron:udp?") + "|".join(params)


def reply_channel(
    control: str,
    session_id: int,
    receiver_host: str,
    term_length: int,
    mtu: int | None = None,
    *,
    heartbeat_interval: float | None = None,
    tail_probe: float | None = None,
) -> str:
    """A server's stream to one client (handshake answers, a connection's stream): it leaves from the server's
    control address and goes wherever the client's status messages naming ``session_id`` come from, if they come
    from ``receiver_host`` (Aeron's dynamic multi-destination control mode; the client's public address and port
    when it is behind a NAT). Nothing is sent before the client speaks."""
    params = [
        f"control={control}",
        "control-mode=dynamic",
        f"session-id={session_id}",
        f"receiver-host={receiver_host}",
        f"term-length={term_length}",
    ]
    if mtu is not None:
        params.append(f"mtu={mtu}")
    params += _heartbeat_params(heartbeat_interval, tail_probe)
    return "aeron:udp?" + "|".join(params)


def _heartbeat_params(interval: float | None, tail_probe: float | None) -> list[str]:
    """How often the sending driver heartbeats an idle stream, and how soon after data it sends one anyway (read by
    our driver only; the wire is unchanged: both are ordinary heartbeats)."""
    params = [] if interval is None else [f"heartbeat-interval={round(interval * 1000)}ms"]
    if tail_probe is not None:
        params.append(f"tail-probe={max(1, round(tail_probe * 1000))}ms")
    return params


def host_of(source_identity: str) -> str:
    """The IP of an image's ``source_identity`` (``ip:port`` or ``[v6]:port``)."""
    host, _, _ = source_identity.rpartition(":")
    return host.strip("[]") or source_identity


def is_local_host(ip: str) -> bool:
    """True for loopback addresses and addresses of this machine's interfaces."""
    address = ipaddress.ip_address(ip)
    if address.is_loopback:
        return True
    try:
        with socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


_ROUTE_LOOKUP_TTL_NS = 1_000_000_000
_ROUTE_LOOKUPS_MAX = 256
_route_clock_ns = time.monotonic_ns
_route_lookups: dict[str, tuple[int, str]] = {}
"""Recent answers of :func:`local_address_towards` by destination, for :data:`_ROUTE_LOOKUP_TTL_NS` (a route that
changes is seen a second later): a connect storm asked the kernel twice per client, a socket each time. At most
:data:`_ROUTE_LOOKUPS_MAX` destinations (the oldest goes first)."""


def local_address_towards(ip: str) -> str:
    """The local address the kernel would use to reach ``ip`` (no packet is sent)."""
    now_ns = _route_clock_ns()
    known = _route_lookups.get(ip)
    if known is not None and now_ns - known[0] < _ROUTE_LOOKUP_TTL_NS:
        return known[1]
    family = socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((ip, 9))
        local = str(s.getsockname()[0])
    if ip not in _route_lookups and len(_route_lookups) >= _ROUTE_LOOKUPS_MAX:
        del _route_lookups[next(iter(_route_lookups))]
    _route_lookups[ip] = (now_ns, local)
    return local


def free_udp_port(host: str) -> int:
    """A UDP port free on ``host`` right now (the driver binds it next)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def resolve(host: str) -> str:
    """Host name to an IP address, without blocking the loop."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    return str(infos[0][4][0])


async def add_pair(
    aeron: Aeron, subscription: tuple[str, int], publication: tuple[str, int]
) -> tuple[Subscription, ExclusivePublication]:
    """Add a subscription and an exclusive publication at once (two driver round trips in parallel).

    If either fails, the other is closed again and the first error is raised.
    """
    results = await asyncio.gather(
        aeron.add_subscription_async(*subscription),
        aeron.add_exclusive_publication_async(*publication),
        return_exceptions=True,
    )
    sub, pub = results
    if isinstance(sub, BaseException) or isinstance(pub, BaseException):
        for made in results:
            if not isinstance(made, BaseException):
                with contextlib.suppress(Exception):
                    await made.close_async()
        raise sub if isinstance(sub, BaseException) else pub  # type: ignore[misc]
    return sub, pub


async def wait_connected(publication: Publication, timeout: float, aeron: Aeron | None = None) -> None:
    """Until a subscriber is connected to ``publication``; TimeoutError after ``timeout`` seconds.

    With ``aeron`` an INVOKER-mode driver in this process is run while waiting (the poller may be napping).
    """

    def connected() -> bool:
        if aeron is not None and not publication.is_connected:
            _drive(aeron)
        return publication.is_connected

    await _wait(connected, publication, "no subscriber connected to", timeout)


async def wait_image(subscription: Subscription, timeout: float, aeron: Aeron | None = None) -> None:
    """Until ``subscription`` has an image (its publisher is there); TimeoutError after ``timeout`` seconds.

    Images arrive through the client conductor, whose thread sleeps while idle; with ``aeron`` the wait
    services the conductor itself, so the image shows up as soon as the driver announced it.
    """

    def arrived() -> bool:
        if aeron is not None and not subscription.images:
            _drive(aeron, conductor=True)
        return bool(subscription.images)

    await _wait(arrived, subscription, "no publisher reached", timeout)


async def _wait(done: Callable[[], bool], resource: Publication | Subscription, missing: str, timeout: float) -> None:
    started = time.monotonic()
    deadline = started + timeout
    backoff = PollBackoff(yield_window=_YIELD_WINDOW_S)
    patient = False
    while not done():
        now = time.monotonic()
        if resource.is_closed:
            raise ConnectionError(f"{resource!r} closed while waiting ({missing} it yet)")
        if now > deadline:
            raise TimeoutError(f"{missing} {resource!r} within {timeout:g} s")
        if not patient and now - started > _PATIENT_AFTER_S:
            patient = True
            backoff = PollBackoff(max_sleep=_PATIENT_SLEEP_S)
        await backoff.idle()
