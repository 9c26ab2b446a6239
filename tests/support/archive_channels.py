"""Archive channels for tests: everything on IPC.

Aeron Archive's defaults put the control, response and event streams on UDP
ports 8010, 8020 and 8030 of localhost; archives of different drivers running
at once (tests in parallel, an archive of ours beside Java's) would share those
ports. Tests use IPC unless they test UDP control on purpose, with ports of their own.
"""

from __future__ import annotations

__all__ = ["LOCAL_ARCHIVE_ENV"]

_IPC = "aeron:ipc?term-length=64k"

LOCAL_ARCHIVE_ENV: dict[str, str] = {
    "AERON_ARCHIVE_CONTROL_CHANNEL": _IPC,
    "AERON_ARCHIVE_CONTROL_RESPONSE_CHANNEL": _IPC,
    "AERON_ARCHIVE_RECORDING_EVENTS_CHANNEL": _IPC,
}
