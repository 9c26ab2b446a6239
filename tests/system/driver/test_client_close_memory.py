"""Closing a client unmaps cnc.dat; positions and limits handed out earlier must not point into freed memory.

Counter windows (an image's subscriber position, a publication's limit) hold the mapping, so reading one after
the client closed reads stale memory instead of faulting. The scenario runs in a child process: a fault there is
a failed test, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCENARIO = textwrap.dedent(
    """
    import sys, time
    from driver.client import Aeron
    from driver.concurrent._watches import FrameWatch
    from driver.core.media_driver import MediaDriver

    aeron_dir = sys.argv[1]
    driver = MediaDriver.launch(aeron_dir=aeron_dir)
    client = Aeron.connect(aeron_dir=aeron_dir)
    subscription = client.add_subscription("aeron:ipc?term-length=64k", 7)
    publication = client.add_publication("aeron:ipc?term-length=64k", 7)
    deadline = time.monotonic() + 20
    while not subscription.images and time.monotonic() < deadline:
        time.sleep(0.005)
    image = subscription.images[0]
    watch = FrameWatch([image.ready_entry])
    assert publication.offer(b"x" * 32) > 0
    assert watch.ready() == [0]
    client.close()
    driver.close()
    # The files are gone and the client closed; the counter windows still read the old values.
    print("ready after close:", watch.ready())
    print("position after close:", image.position)
    print("limit window after close:", publication._limit.get_long_volatile(0) >= 0)
    """
)


def test_position_and_limit_windows_outlive_the_closed_client(aeron_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(aeron_dir)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "ready after close: []" in result.stdout  # the image's terms were released: nothing to read
    assert "position after close: 0" in result.stdout
    assert "limit window after close: True" in result.stdout
