"""What every tool shares: opening a driver directory safely and formatting times.

Theory of operation: an operator points a tool at a directory in any state —
missing, half created by a starting driver, left behind by a dead one, from
another Aeron generation, or cut short. :func:`open_cnc` looks at the file with
plain reads first and turns each of those states into a :class:`ToolError`
whose one-line message says what is wrong; only a file that passes is mapped
(via :meth:`CncFile.map_existing`). The CLI prints the message and exits 1, so
no state of the directory ends in a traceback.
"""

from __future__ import annotations

import datetime
import os
import struct
from pathlib import Path

from driver.cnc import (
    CNC_FILE,
    END_OF_METADATA_OFFSET,
    TO_DRIVER_BUFFER_LENGTH_OFFSET,
    CncFile,
    CncGeneration,
)
from driver.concurrent.counters import CountersReader
from driver.concurrent.loss_report import LOSS_REPORT_FILE, LossReportFile
from driver.config import configured_aeron_dir
from driver.errors import CncVersionError, DriverError, DriverTimeoutError

__all__ = [
    "ToolError",
    "default_directory",
    "format_iso_time",
    "format_java_time",
    "open_cnc",
    "open_counters",
    "open_loss_report",
]


class ToolError(DriverError):
    """A condition the tools report as one line and exit status 1."""


def default_directory() -> Path:
    """``$AERON_DIR`` if set, else Aeron's default directory for this user: where drivers, and end points that
    name neither a directory nor an app id, run."""
    return configured_aeron_dir()


def _check_directory(directory: Path) -> None:
    if not directory.exists():
        raise ToolError(f"{directory}: no such directory (no driver has used it; check -d/--dir or AERON_DIR)")
    if not directory.is_dir():
        raise ToolError(f"{directory}: not a directory")


def _describe_header(path: Path) -> None:
    """Raise a ToolError for a cnc.dat that is missing, being created or too short to map."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(END_OF_METADATA_OFFSET)
    except FileNotFoundError:
        raise ToolError(f"{path.parent}: no {CNC_FILE} (no driver has started in this directory yet)") from None
    except PermissionError:
        raise ToolError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise ToolError(f"{path}: is a directory, not a CnC file") from None
    if size == 0:
        raise ToolError(f"{path}: empty (the driver is creating it; try again in a moment)")
    if size < END_OF_METADATA_OFFSET or len(head) < END_OF_METADATA_OFFSET:
        raise ToolError(f"{path}: truncated ({size} bytes, the header alone needs {END_OF_METADATA_OFFSET})")
    version = struct.unpack_from("<i", head, 0)[0]
    if version == 0:
        raise ToolError(f"{path}: CnC version 0 (the driver is still creating it; try again in a moment)")
    try:
        CncGeneration.for_version(version)
    except CncVersionError as exc:
        raise ToolError(f"{path}: {exc}") from None
    lengths = struct.unpack_from("<5i", head, TO_DRIVER_BUFFER_LENGTH_OFFSET)
    needed = END_OF_METADATA_OFFSET + sum(lengths)
    if min(lengths) < 0 or needed > size:
        raise ToolError(
            f"{path}: truncated ({size} bytes, its header describes {needed}) or not a CnC file of version {version}"
        )


def open_cnc(directory: Path) -> CncFile:
    """Map the directory's cnc.dat or raise a ToolError that says why it cannot be read."""
    directory = Path(directory)
    _check_directory(directory)
    path = directory / CNC_FILE
    _describe_header(path)
    try:
        return CncFile.map_existing(directory, timeout_s=0.0)
    except DriverTimeoutError:
        raise ToolError(f"{path}: CnC version 0 (the driver is still creating it; try again in a moment)") from None
    except (CncVersionError, DriverError) as exc:
        raise ToolError(f"{path}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: cannot map: {exc}") from None


def open_counters(cnc: CncFile) -> CountersReader:
    return CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)


def open_loss_report(directory: Path) -> LossReportFile:
    """Map ``loss-report.dat`` or raise a ToolError that says why it cannot be read."""
    directory = Path(directory)
    _check_directory(directory)
    path = directory / LOSS_REPORT_FILE
    try:
        return LossReportFile.map_existing(directory)
    except FileNotFoundError:
        raise ToolError(f"{directory}: no {LOSS_REPORT_FILE} (the driver has not created a loss report)") from None
    except PermissionError:
        raise ToolError(f"{path}: permission denied") from None
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: cannot map: {exc}") from None


def format_java_time(epoch_ms: int) -> str:
    """Local time as Java's ``SimpleDateFormat("yyyy-MM-dd HH:mm:ss.SSSZ")`` prints it (ErrorStat, LossStat)."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms // 1000).astimezone()
    except (OverflowError, OSError, ValueError):
        return f"<invalid time {epoch_ms}>"
    return f"{moment:%Y-%m-%d %H:%M:%S}.{epoch_ms % 1000:03d}{moment:%z}"


def format_iso_time(epoch_ms: int) -> str:
    """UTC ISO-8601 with milliseconds, for JSON output."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"<invalid time {epoch_ms}>"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
