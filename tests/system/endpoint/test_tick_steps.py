"""The end points of one event loop share its tick steps (ten a second), but an end point whose own timers are not
due skips them: an idle client (no buffered session, counters refreshed once a second) looks at its timers about
once a second and when its connection's keepalive falls due, while a server on the same loop, which expires
half-done handshakes, looks every step. A process of a thousand bots ran ten thousand end point steps a second.

Real server and client on one loop and one driver (IPC); the steps are counted, never timed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from endpoint import Client, Server
from support.endpoints import client_config, connected_client, running_server, server_config, wait_until

_STEPS = 30


def _count_timer_looks(endpoint: Server | Client, counts: dict[str, int], name: str) -> None:
    looks: Callable[[int], bool] = endpoint._tick_extra

    def counted(now_ns: int) -> bool:
        counts[name] += 1
        return looks(now_ns)

    endpoint._tick_extra = counted  # type: ignore[method-assign]


async def test_an_idle_client_skips_the_tick_steps_its_timers_do_not_need(aeron_dir: Path, port: int) -> None:
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config("ipc", aeron_dir, aeron_dir), port) as (client, conn),
    ):
        counts = {"server": 0, "client": 0}
        _count_timer_looks(server, counts, "server")
        _count_timer_looks(client, counts, "client")
        await wait_until(lambda: counts["server"] >= _STEPS, timeout=60, what=f"{_STEPS} tick steps")
        assert counts["client"] <= counts["server"] // 2, counts
        assert counts["client"] >= 1, "a second's refresh still wakes its timers"
        assert not conn.is_closed
