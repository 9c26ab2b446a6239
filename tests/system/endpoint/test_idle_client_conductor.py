"""An end point whose driver runs on threads of its own (or in another process) has the driver client's conductor
on a thread: it naps 2 ms while the client is active and 10 ms once the conductor has found nothing to do for a
second (an idle connection's keepalives and the client's own keepalives to the driver do not count), so an idle
end point's thread wakes about a hundred times a second, not five hundred; a connect after the quiet spell is
answered as before.

Real drivers (SHARED mode, threads), real UDP. The check reads what the conductor thread's idle strategy would
sleep now, from what the real conductor reported; it never times anything.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from driver.client.aeron import Aeron
from driver.idle import BackoffIdleStrategy
from endpoint import Client
from support.endpoints import Num, client_config, running_server, server_config

_SAMPLE_S = 0.1
_SAMPLES = 150  # 15 s at most; the leftovers are gone within ~5 s
_QUIET_STREAK_S = 2.0  # longer than the keepalive interval to the driver (0.5 s): a keepalive is not work


def _conductor_idle(aeron: Aeron) -> BackoffIdleStrategy:
    runner = aeron._runner
    assert runner is not None, "the driver client's conductor runs on a thread of its own"
    strategy = runner._idle
    assert isinstance(strategy, BackoffIdleStrategy)
    return strategy


async def test_an_idle_end_points_client_conductor_naps_longer_once_quiet(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    config = server_config(aeron_dir, port, threading_mode="SHARED")
    async with running_server(config) as server:
        received: list[Num] = []
        server.on_message(Num, lambda conn, msg: received.append(msg))
        strategy = _conductor_idle(server._aeron())
        client = Client(client_config("udp", aeron_dir, client_dir, threading_mode="SHARED"))
        try:
            await client.connect("127.0.0.1", port)
            await client.send(Num(1))
            # Once the handshake's leftovers are gone (its streams close after a linger, their logs after the
            # client's resource linger: a few seconds), the conductor finds nothing to do while the connection idles
            # (its keepalives flowing both ways, the client's keepalives to the driver every 500 ms): it takes the
            # long nap, for as long as that lasts.
            quiet_since: float | None = None
            loop = asyncio.get_running_loop()
            for _ in range(_SAMPLES):
                if strategy.park_s() == 0.01:
                    quiet_since = loop.time() if quiet_since is None else quiet_since
                    if loop.time() - quiet_since >= _QUIET_STREAK_S:
                        break
                else:
                    quiet_since = None
                await asyncio.sleep(_SAMPLE_S)
            assert quiet_since is not None, "the conductor never went quiet"
            assert loop.time() - quiet_since >= _QUIET_STREAK_S
        finally:
            await client.close()
        assert received == [Num(1)]

        # After the quiet spell a new client still connects and is heard (its images reach the server's
        # conductor thread, napping the longer nap, within a handshake's patience).
        late = Client(client_config("udp", aeron_dir, client_dir, threading_mode="SHARED"))
        try:
            await late.connect("127.0.0.1", port)
            await late.send(Num(2))
            async with asyncio.timeout(10):
                while len(received) < 2:
                    await asyncio.sleep(0.01)
        finally:
            await late.close()
        assert received == [Num(1), Num(2)]
