"""The command-and-control file ``<aeron.dir>/cnc.dat``, by generation.

Theory of operation: the driver creates cnc.dat and maps it; clients map it to
find the driver. The file is a metadata header followed by five buffers laid
end to end, from ``END_OF_METADATA_OFFSET`` (128) onwards::

    0   int32 cnc version         written LAST (volatile store) = "driver ready"
    4   int32 to-driver length    ManyToOneRingBuffer incl. its 768-byte trailer
    8   int32 to-clients length   broadcast buffer incl. its 128-byte trailer
    12  int32 counters metadata length  (= values length x 4)
    16  int32 counters values length
    20  int32 error log length
    24  int64 client liveness timeout (ns)
    32  int64 driver start timestamp (epoch ms)
    40  int64 driver pid
    48  int32 file page size      CURRENT generation only
    128 to-driver | to-clients | counters metadata | counters values | error log

    file length = align(128 + sum of the buffer lengths, file page size)

The generation decides the version value and whether the page size field is
there. ``V15`` (Aeron 1.15.x) writes the plain int 15 and its clients demand
exactly 15. ``CURRENT`` (Aeron 1.30+) writes SemanticVersion(0, 2, 0) = 512 and
its clients compare the major part only. Nothing else in the header differs.

The version stays 0 until the driver has set everything up and stamped the
to-driver consumer heartbeat; only then does :meth:`CncFile.signal_ready`
store it. A client waits for the file, then for a non-zero version, and
refuses a version it does not speak.
"""

from __future__ import annotations

import enum
import errno
import mmap
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path

from driver.concurrent.atomic_buffer import AtomicBuffer, align, is_power_of_two
from driver.errors import CncVersionError, DriverConfigurationError, DriverError, DriverTimeoutError, StorageSpaceError
from driver.int32 import INT32_MAX as _INT32_MAX

__all__ = [
    "CLIENT_LIVENESS_TIMEOUT_OFFSET",
    "CNC_FILE",
    "CNC_VERSION_OFFSET",
    "COUNTERS_METADATA_BUFFER_LENGTH_OFFSET",
    "COUNTERS_METADATA_PER_VALUES_RATIO",
    "COUNTERS_VALUES_BUFFER_LENGTH_OFFSET",
    "END_OF_METADATA_OFFSET",
    "ERROR_LOG_BUFFER_LENGTH_OFFSET",
    "FILE_PAGE_SIZE_OFFSET",
    "PID_OFFSET",
    "START_TIMESTAMP_OFFSET",
    "TO_CLIENTS_BUFFER_LENGTH_OFFSET",
    "TO_DRIVER_BUFFER_LENGTH_OFFSET",
    "CncFile",
    "CncGeneration",
    "compute_cnc_file_length",
    "semantic_version",
    "semantic_version_major",
    "semantic_version_minor",
    "semantic_version_patch",
    "semantic_version_str",
]

CNC_FILE = "cnc.dat"

CNC_VERSION_OFFSET = 0
TO_DRIVER_BUFFER_LENGTH_OFFSET = 4
TO_CLIENTS_BUFFER_LENGTH_OFFSET = 8
COUNTERS_METADATA_BUFFER_LENGTH_OFFSET = 12
COUNTERS_VALUES_BUFFER_LENGTH_OFFSET = 16
ERROR_LOG_BUFFER_LENGTH_OFFSET = 20
CLIENT_LIVENESS_TIMEOUT_OFFSET = 24
START_TIMESTAMP_OFFSET = 32
PID_OFFSET = 40
FILE_PAGE_SIZE_OFFSET = 48
END_OF_METADATA_OFFSET = 128

# Agrona counters: a 512-byte metadata record per 128-byte value slot.
COUNTERS_METADATA_PER_VALUES_RATIO = 4

_PAGE_MIN_SIZE = 4 * 1024
_PAGE_MAX_SIZE = 1024 * 1024 * 1024
_RING_TRAILER_LENGTH = 768
_BROADCAST_TRAILER_LENGTH = 128
_COUNTER_LENGTH = 128

_FILE_POLL_S = 0.016
_VERSION_POLL_S = 0.001


def semantic_version(major: int, minor: int, patch: int) -> int:
    """Agrona's SemanticVersion.compose: one byte each, major highest."""
    for name, part in (("major", major), ("minor", minor), ("patch", patch)):
        if not 0 <= part <= 255:
            raise DriverConfigurationError(f"semantic version {name}", part, "0..255")
    return (major << 16) | (minor << 8) | patch


def semantic_version_major(version: int) -> int:
    return (version >> 16) & 0xFF


def semantic_version_minor(version: int) -> int:
    return (version >> 8) & 0xFF


def semantic_version_patch(version: int) -> int:
    return version & 0xFF


def semantic_version_str(version: int) -> str:
    return f"{semantic_version_major(version)}.{semantic_version_minor(version)}.{semantic_version_patch(version)}"


class CncGeneration(enum.Enum):
    """Which Aeron's cnc.dat layout and version number to speak."""

    V15 = 15
    CURRENT = 512  # SemanticVersion(0, 2, 0)

    @property
    def version(self) -> int:
        """The value stored at offset 0 when the driver is ready."""
        return int(self.value)

    @property
    def metadata_length(self) -> int:
        """Bytes of the header that carry fields (the rest up to 128 is zero)."""
        return FILE_PAGE_SIZE_OFFSET + 4 if self is CncGeneration.CURRENT else FILE_PAGE_SIZE_OFFSET

    @property
    def has_file_page_size(self) -> bool:
        return self is CncGeneration.CURRENT

    @property
    def label(self) -> str:
        if self is CncGeneration.V15:
            return "15 (Aeron 1.15.x)"
        return f"{self.version} (SemanticVersion {semantic_version_str(self.version)}, Aeron 1.30+)"

    def accepts(self, version: int) -> bool:
        """Whether a client of this generation accepts a file carrying ``version``.

        1.15 clients want exactly 15; current clients compare the semantic major only.
        """
        if self is CncGeneration.V15:
            return version == self.version
        return semantic_version_major(version) == semantic_version_major(self.version)

    @classmethod
    def for_version(cls, version: int, supported: Collection[CncGeneration] | None = None) -> CncGeneration:
        """The generation whose layout a file with ``version`` has, if it is among ``supported``."""
        allowed = tuple(cls) if supported is None else tuple(supported)
        found: CncGeneration | None = None
        if version == cls.V15.version:
            found = cls.V15
        elif (
            semantic_version_major(version) == semantic_version_major(cls.CURRENT.version)
            and semantic_version_minor(version) == semantic_version_minor(cls.CURRENT.version)
            and version >> 24 == 0
        ):
            found = cls.CURRENT
        if found is None or found not in allowed:
            raise CncVersionError(
                f"cnc.dat version {version} ({semantic_version_str(version)}) is not supported; "
                f"supported: {', '.join(g.label for g in allowed)}"
            )
        return found

    @classmethod
    def parse(cls, text: str) -> CncGeneration:
        """Read a setting: "15"/"v15" or "current"/"512"."""
        key = text.strip().lower()
        if key in ("15", "v15", "1.15", "1.15.1"):
            return cls.V15
        if key in ("current", "512", "0.2.0"):
            return cls.CURRENT
        raise DriverConfigurationError("aeron.cnc.version", text, '"15" or "current"')


def compute_cnc_file_length(total_length_of_buffers: int, file_page_size: int) -> int:
    return align(END_OF_METADATA_OFFSET + total_length_of_buffers, file_page_size)


def _check_length(field: str, value: int, trailer: int = 0, power_of_two: bool = False) -> None:
    if not isinstance(value, int) or value <= trailer or value > _INT32_MAX:
        raise DriverConfigurationError(field, value, f"an int in {trailer + 1}..{_INT32_MAX}")
    if power_of_two and not is_power_of_two(value - trailer):
        suffix = f" + {trailer}" if trailer else ""
        raise DriverConfigurationError(field, value, f"a power of two{suffix}")


class CncFile:
    """A mapped cnc.dat: the header fields and an AtomicBuffer over each of the five buffers."""

    __slots__ = (
        "_buffers",
        "_closed",
        "_counters_metadata",
        "_counters_values",
        "_counters_values_offset",
        "_error_log",
        "_generation",
        "_metadata",
        "_mmap",
        "_path",
        "_to_clients",
        "_to_driver",
    )

    def __init__(self, path: Path, mapping: mmap.mmap, generation: CncGeneration) -> None:
        """Wrap an mmap whose header is filled in; use :meth:`create` or :meth:`map_existing`."""
        self._path = path
        self._mmap = mapping
        self._generation = generation
        self._closed = False
        self._metadata = AtomicBuffer(mapping, 0, END_OF_METADATA_OFFSET)
        header = self._metadata
        to_driver_length = header.get_int(TO_DRIVER_BUFFER_LENGTH_OFFSET)
        to_clients_length = header.get_int(TO_CLIENTS_BUFFER_LENGTH_OFFSET)
        counters_metadata_length = header.get_int(COUNTERS_METADATA_BUFFER_LENGTH_OFFSET)
        counters_values_length = header.get_int(COUNTERS_VALUES_BUFFER_LENGTH_OFFSET)
        error_log_length = header.get_int(ERROR_LOG_BUFFER_LENGTH_OFFSET)
        lengths = (
            to_driver_length,
            to_clients_length,
            counters_metadata_length,
            counters_values_length,
            error_log_length,
        )
        needed = END_OF_METADATA_OFFSET + sum(lengths)
        if min(lengths) < 0 or needed > len(mapping):
            self._metadata.release()
            raise CncVersionError(
                f"{path} is {len(mapping)} bytes but its header describes buffers {lengths} ({needed} bytes)"
            )
        offset = END_OF_METADATA_OFFSET
        self._counters_values_offset = offset + to_driver_length + to_clients_length + counters_metadata_length
        buffers: list[AtomicBuffer] = []
        for length in lengths:
            buffers.append(AtomicBuffer(mapping, offset, length))
            offset += length
        self._buffers = buffers
        self._to_driver, self._to_clients, self._counters_metadata, self._counters_values, self._error_log = buffers

    # ------------------------------------------------------------------ creation (driver side)

    @classmethod
    def create(
        cls,
        directory: Path,
        *,
        to_driver_length: int,
        to_clients_length: int,
        counters_values_length: int,
        error_log_length: int,
        client_liveness_timeout_ns: int,
        start_timestamp_ms: int,
        pid: int,
        generation: CncGeneration = CncGeneration.V15,
        file_page_size: int = 4096,
    ) -> CncFile:
        """Create ``directory/cnc.dat`` with its header filled in and the version still 0.

        An existing cnc.dat is unlinked first, so a client still mapping an old
        one keeps its (dead) copy instead of seeing this one change under it.
        Deciding whether a live driver owns the directory is the caller's job.
        """
        _check_length("to_driver_length", to_driver_length, _RING_TRAILER_LENGTH, power_of_two=True)
        _check_length("to_clients_length", to_clients_length, _BROADCAST_TRAILER_LENGTH, power_of_two=True)
        _check_length("counters_values_length", counters_values_length)
        if counters_values_length % _COUNTER_LENGTH:
            raise DriverConfigurationError(
                "counters_values_length", counters_values_length, f"a multiple of {_COUNTER_LENGTH}"
            )
        _check_length("error_log_length", error_log_length)
        if not (is_power_of_two(file_page_size) and _PAGE_MIN_SIZE <= file_page_size <= _PAGE_MAX_SIZE):
            raise DriverConfigurationError(
                "file_page_size", file_page_size, f"a power of two in {_PAGE_MIN_SIZE}..{_PAGE_MAX_SIZE}"
            )
        if client_liveness_timeout_ns <= 0:
            raise DriverConfigurationError("client_liveness_timeout_ns", client_liveness_timeout_ns, "> 0")
        counters_metadata_length = counters_values_length * COUNTERS_METADATA_PER_VALUES_RATIO
        if counters_metadata_length > _INT32_MAX:
            raise DriverConfigurationError(
                "counters_values_length", counters_values_length, f"<= {_INT32_MAX // 4} (metadata is 4x)"
            )
        total = to_driver_length + to_clients_length + counters_metadata_length + counters_values_length
        total += error_log_length
        file_length = compute_cnc_file_length(total, file_page_size)
        if file_length > _INT32_MAX:
            raise DriverConfigurationError("cnc.dat length", file_length, f"<= {_INT32_MAX} bytes in total")

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / CNC_FILE
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            try:
                os.posix_fallocate(fd, 0, file_length)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                    path.unlink(missing_ok=True)
                    raise StorageSpaceError(
                        exc.errno, f"cannot allocate {file_length} bytes for {path}: {exc.strerror}"
                    ) from exc
                os.ftruncate(fd, file_length)
            mapping = mmap.mmap(fd, file_length)
        finally:
            os.close(fd)

        header = AtomicBuffer(mapping, 0, END_OF_METADATA_OFFSET)
        try:
            header.put_int(TO_DRIVER_BUFFER_LENGTH_OFFSET, to_driver_length)
            header.put_int(TO_CLIENTS_BUFFER_LENGTH_OFFSET, to_clients_length)
            header.put_int(COUNTERS_METADATA_BUFFER_LENGTH_OFFSET, counters_metadata_length)
            header.put_int(COUNTERS_VALUES_BUFFER_LENGTH_OFFSET, counters_values_length)
            header.put_int(ERROR_LOG_BUFFER_LENGTH_OFFSET, error_log_length)
            header.put_long(CLIENT_LIVENESS_TIMEOUT_OFFSET, client_liveness_timeout_ns)
            header.put_long(START_TIMESTAMP_OFFSET, start_timestamp_ms)
            header.put_long(PID_OFFSET, pid)
            if generation.has_file_page_size:
                header.put_int(FILE_PAGE_SIZE_OFFSET, file_page_size)
        finally:
            header.release()
        return cls(path, mapping, generation)

    def signal_ready(self) -> None:
        """Publish the version; call after stamping the to-driver consumer heartbeat."""
        self._check_open()
        self._metadata.put_int_volatile(CNC_VERSION_OFFSET, self._generation.version)

    # ------------------------------------------------------------------ mapping (client side)

    @classmethod
    def map_existing(
        cls,
        directory: Path,
        *,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        supported: Collection[CncGeneration] | None = None,
    ) -> CncFile:
        """Map ``directory/cnc.dat`` once it exists and its version is set.

        Waits (polling, bounded by ``timeout_s`` on ``clock``) for the file,
        then for a non-zero version. Raises DriverTimeoutError when the
        deadline passes and CncVersionError for a version not in ``supported``
        (default: every generation).
        """
        path = Path(directory) / CNC_FILE
        deadline = clock() + timeout_s
        mapping = cls._wait_for_file(path, deadline, clock, sleep)
        try:
            version_view = AtomicBuffer(mapping, 0, 4)
            try:
                while True:
                    version = version_view.get_int_volatile(CNC_VERSION_OFFSET)
                    if version != 0:
                        break
                    if clock() >= deadline:
                        raise DriverTimeoutError(f"{path} exists but the driver did not mark it ready in time")
                    sleep(_VERSION_POLL_S)
            finally:
                version_view.release()
            generation = CncGeneration.for_version(version, supported)
            size = os.stat(path).st_size
            if size > len(mapping):
                mapping.close()
                mapping = cls._map(path)
            return cls(path, mapping, generation)
        except BaseException:
            mapping.close()
            raise

    @staticmethod
    def _map(path: Path) -> mmap.mmap:
        fd = os.open(path, os.O_RDWR)
        try:
            return mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    @classmethod
    def _wait_for_file(
        cls, path: Path, deadline: float, clock: Callable[[], float], sleep: Callable[[float], None]
    ) -> mmap.mmap:
        while True:
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                pass
            else:
                try:
                    size = os.fstat(fd).st_size
                    if size >= END_OF_METADATA_OFFSET:
                        return mmap.mmap(fd, size)
                finally:
                    os.close(fd)
            if clock() >= deadline:
                raise DriverTimeoutError(f"no driver: {path} did not appear (with a header) in time")
            sleep(_FILE_POLL_S)

    # ------------------------------------------------------------------ accessors

    def _check_open(self) -> None:
        if self._closed:
            raise DriverError(f"{self._path} is closed")

    @property
    def path(self) -> Path:
        return self._path

    @property
    def generation(self) -> CncGeneration:
        return self._generation

    @property
    def version(self) -> int:
        """The version field as now stored (0 until the driver signals ready)."""
        self._check_open()
        return self._metadata.get_int_volatile(CNC_VERSION_OFFSET)

    @property
    def metadata_buffer(self) -> AtomicBuffer:
        self._check_open()
        return self._metadata

    @property
    def to_driver_buffer(self) -> AtomicBuffer:
        self._check_open()
        return self._to_driver

    @property
    def to_clients_buffer(self) -> AtomicBuffer:
        self._check_open()
        return self._to_clients

    @property
    def counters_metadata_buffer(self) -> AtomicBuffer:
        self._check_open()
        return self._counters_metadata

    @property
    def counters_values_buffer(self) -> AtomicBuffer:
        self._check_open()
        return self._counters_values

    def counter_value_window(self, counter_id: int, length: int = 8) -> AtomicBuffer:
        """A window on one counter's value that holds the mapping: closing the file while it lives leaves
        the memory mapped (unmapped when the last window is collected), so a late read never faults."""
        self._check_open()
        offset = counter_id * _COUNTER_LENGTH
        if counter_id < 0 or offset + length > self._counters_values.capacity:
            raise ValueError(f"counter id {counter_id} is outside the counters values buffer")
        return AtomicBuffer(self._mmap, self._counters_values_offset + offset, length)

    @property
    def error_log_buffer(self) -> AtomicBuffer:
        self._check_open()
        return self._error_log

    @property
    def client_liveness_timeout_ns(self) -> int:
        self._check_open()
        return self._metadata.get_long(CLIENT_LIVENESS_TIMEOUT_OFFSET)

    @property
    def start_timestamp_ms(self) -> int:
        self._check_open()
        return self._metadata.get_long(START_TIMESTAMP_OFFSET)

    @property
    def pid(self) -> int:
        self._check_open()
        return self._metadata.get_long(PID_OFFSET)

    @property
    def file_page_size(self) -> int | None:
        """The page size the file was aligned to; only the CURRENT generation records it."""
        self._check_open()
        if not self._generation.has_file_page_size:
            return None
        return self._metadata.get_int(FILE_PAGE_SIZE_OFFSET)

    @property
    def file_length(self) -> int:
        self._check_open()
        return len(self._mmap)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the buffers and unmap; idempotent.

        If a caller still holds a memoryview from one of the buffers the mmap
        cannot close yet; it is then left to close when the last view goes.
        """
        if self._closed:
            return
        self._closed = True
        for buffer in (*self._buffers, self._metadata):
            buffer.release()
        try:
            self._mmap.close()
        except BufferError:
            pass

    def __enter__(self) -> CncFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"version={self.version}"
        return f"CncFile({str(self._path)!r}, {self._generation.name}, {state})"
