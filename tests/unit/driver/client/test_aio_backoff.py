"""PollBackoff: waits nap with the running event loop's own sleep (anyio's looks the library up on every call)."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from driver.client.aio import PollBackoff


def _naps_after(runner: str) -> object:
    seen: list[object] = []

    async def wait() -> None:
        backoff = PollBackoff(max_sleep=0.000_1)
        for _ in range(backoff.max_yields + 5):  # past the yields, into the sleeps
            await backoff.idle()
        seen.append(backoff._nap)

    if runner == "asyncio":
        asyncio.run(wait())
    else:
        pytest.importorskip(runner)
        anyio.run(wait, backend=runner)
    return seen[0]


def test_under_asyncio_a_backoff_naps_with_asyncio_sleep() -> None:
    assert _naps_after("asyncio") is asyncio.sleep


def test_under_trio_a_backoff_naps_with_anyio_sleep() -> None:
    assert _naps_after("trio") is anyio.sleep
