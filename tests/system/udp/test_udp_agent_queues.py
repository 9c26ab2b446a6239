"""No silent drops inside the driver: a full queue between its agents defers, never loses, a command.

The driver runs with queues between its conductor and its sender and receiver
that hold a single command, and a client floods it with concurrent adds and
removes of UDP publications and subscriptions on several channels. Every add is
answered, the sender and receiver get every resource, the conductor counts the
commands it had to keep for a later cycle, and once everything is closed every
log file, counter, socket and session id is free again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from udp_helpers import UdpDrivers, allocated_counters, counters_of

from driver.client import Aeron
from driver.concurrent.system_counters import DriverSystemCounterId, SystemCounterId
from driver.core.media_driver import MediaDriver
from support.ports import distinct_free_udp_ports
from support.waiting import WaitTimeoutError

CHANNELS = 5
PER_CHANNEL = 16
ROUNDS = 3


def _files(aeron_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(aeron_dir)) for p in aeron_dir.rglob("*") if p.is_file())


def _in_use(aeron_dir: Path) -> list[tuple[int, int, str]]:
    with counters_of(aeron_dir) as (_, reader):
        return allocated_counters(reader)


async def _until(condition: Callable[[], bool], description: str, timeout_s: float = 30.0) -> None:
    """Bounded wait that leaves the event loop (and the client's keepalives) running."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for _ in range(100_000):
        if condition():
            return
        if loop.time() > deadline:
            break
        await asyncio.sleep(0.01)
    raise WaitTimeoutError(f"gave up waiting for {description}")


def _value(driver: MediaDriver, counter: SystemCounterId | DriverSystemCounterId) -> int:
    return driver.conductor.system_counters.get(counter).get()


async def _round(client: Aeron, pub_ports: list[int], sub_ports: list[int], driver: MediaDriver) -> None:
    publications = await asyncio.gather(
        *(
            client.add_exclusive_publication_async(f"aeron:udp?endpoint=127.0.0.1:{port}", 1000 + n)
            for port in pub_ports
            for n in range(PER_CHANNEL)
        )
    )
    subscriptions = await asyncio.gather(
        *(
            client.add_subscription_async(f"aeron:udp?endpoint=127.0.0.1:{port}", 2000 + n)
            for port in sub_ports
            for n in range(PER_CHANNEL)
        )
    )
    total = CHANNELS * PER_CHANNEL
    assert len({p.session_id for p in publications}) == total
    # Nothing lost on the way: the sender has every publication, the receiver every channel.
    await _until(
        lambda: (
            len(driver.conductor.sender.publications) == total and len(driver.conductor.receiver.endpoints) == CHANNELS
        ),
        "every publication at the sender, every channel at the receiver",
    )
    await asyncio.gather(*(p.close_async() for p in publications), *(s.close_async() for s in subscriptions))


@pytest.mark.parametrize("capacity", [1, 3])
def test_a_flood_through_tiny_agent_queues_loses_nothing_and_frees_everything(udp: UdpDrivers, capacity: int) -> None:
    driver = udp.embedded("flood", command_queue_capacity=capacity)
    aeron_dir = Path(driver.aeron_dir)
    files_before = _files(aeron_dir)
    # Each round binds the subscriptions' ports again: ports no socket bound to port 0 (the driver's own send
    # endpoints among them) can be given in between. Ten distinct ones: a port shared by two channels would make
    # them one endpoint.
    ports = sorted(distinct_free_udp_ports(2 * CHANNELS))
    pub_ports, sub_ports = ports[:CHANNELS], ports[CHANNELS:]

    async def main() -> int:
        client = await Aeron.connect_async(aeron_dir=aeron_dir, error_handler=udp.errors)
        try:
            await client.add_counter_async(1001, b"", "first command")  # the client's heartbeat counter is made
            counters_before = len(_in_use(aeron_dir))
            for _ in range(ROUNDS):
                await _round(client, pub_ports, sub_ports, driver)
            # Once every teardown ran: no publication, image, endpoint or session id left, files and counters
            # as before.
            conductor = driver.conductor
            await _until(
                lambda: (
                    not conductor.network.publications
                    and not conductor.network.send_endpoints
                    and not conductor.network.receive_endpoints
                    and not conductor.sender.publications
                    and not conductor.sender.endpoints
                    and not conductor.receiver.endpoints
                    and not conductor._active_session_ids
                    and _files(aeron_dir) == files_before
                    and len(_in_use(aeron_dir)) == counters_before
                ),
                "every log file, counter, socket and session id freed",
            )
            return counters_before
        finally:
            client.close()

    asyncio.run(main())
    # The queues were full (offers refused) and the conductor kept those commands for later.
    assert _value(driver, DriverSystemCounterId.AGENT_COMMANDS_DEFERRED) > 0
    assert _value(driver, SystemCounterId.SENDER_PROXY_FAILS) > 0
    assert _value(driver, SystemCounterId.RECEIVER_PROXY_FAILS) > 0
    assert _value(driver, SystemCounterId.ERRORS) == 0
    assert not driver.conductor.network._tearing_down
    assert udp.errors.seen == []
