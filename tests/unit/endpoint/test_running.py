"""``endpoint.run``: a signal cancels main so its clean-up runs; the exit status says how main ended."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

import endpoint


def _signal_soon(signum: int, delay: float = 0.05) -> None:
    asyncio.get_running_loop().call_later(delay, os.kill, os.getpid(), signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_cancels_main_and_its_clean_up_runs(signum: int) -> None:
    cleaned: list[str] = []

    async def main() -> int:
        _signal_soon(signum)
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.01)  # clean-up may await (a graceful close does)
            cleaned.append("closed")
        return 7  # not reached: the sleep is cancelled

    assert endpoint.run(main) == 0
    assert cleaned == ["closed"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the loop's handlers are gone again


def test_main_status_comes_back() -> None:
    async def main() -> int:
        return 3

    async def quiet() -> None:
        return None

    assert endpoint.run(main) == 3
    assert endpoint.run(quiet) == 0
    assert endpoint.run(quiet()) == 0  # a coroutine object works too


def test_an_exception_out_of_main_gives_1() -> None:
    async def main() -> None:
        raise RuntimeError("broken")

    assert endpoint.run(main) == 1


def test_a_stuck_clean_up_is_cut_short_after_the_shutdown_timeout() -> None:
    stages: list[str] = []

    async def main() -> None:
        _signal_soon(signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        finally:
            stages.append("stopping")
            try:
                await asyncio.sleep(30)  # a close that hangs
            finally:
                stages.append("cut short")

    assert endpoint.run(main, shutdown_timeout=0.2) == 0
    assert stages == ["stopping", "cut short"]


_RAISING_MAIN = """
import sys
import endpoint

async def main() -> None:
    raise RuntimeError("broken on purpose")

sys.exit(endpoint.run(main))
"""


@pytest.mark.parametrize("configured", [False, True], ids=["no logging configured", "logging configured"])
def test_an_exception_out_of_main_is_shown_whether_or_not_logging_is_configured(configured: bool) -> None:
    """The library's loggers carry only a NullHandler: with nothing configured, run prints main's traceback itself."""
    code = ("import logging; logging.basicConfig(format='LOGGED %(message)s')\n" if configured else "") + _RAISING_MAIN
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert done.returncode == 1
    assert "RuntimeError: broken on purpose" in done.stderr
    assert "Traceback" in done.stderr
    assert ("LOGGED main raised" in done.stderr) is configured
