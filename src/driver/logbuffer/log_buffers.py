"""A log buffer file mapped into memory: three terms and the metadata section.

Theory of operation
-------------------
The driver creates the file (:meth:`LogBuffers.create`) with the length from
:func:`compute_log_length`; clients map the file the driver names
(:meth:`LogBuffers.map`) and learn the term length from the metadata, which is
always the last 4096 bytes of the file. The mapping is shared, so stores by any
process are seen by all.

Each term is exposed twice: as an :class:`AtomicBuffer` for ordered/atomic
access and as a memoryview of the mapping (``term_views``) for zero-copy payload
slices. Slices of ``term_views`` keep the mapping alive: :meth:`close` releases
what it owns and unmaps when nothing else still references the memory (else
the mapping is freed when the last slice goes away).

A driver and its clients in one process (an embedded driver) share one mapping
of each log: :meth:`LogBuffers.map` of a file this process created and still
maps reuses that mapping rather than opening and mapping the file again (a
connect storm maps two or three logs per connection on each side). Each
:class:`LogBuffers` holds its own views of it, and the mapping is closed by
whichever closes last, as with slices.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import weakref
from pathlib import Path
from types import TracebackType

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import DriverConfigurationError, StorageSpaceError
from driver.logbuffer.descriptor import (
    LOG_META_DATA_LENGTH,
    LOG_PAGE_SIZE_OFFSET,
    LOG_TERM_LENGTH_OFFSET,
    PARTITION_COUNT,
    check_page_size,
    check_term_length,
    compute_log_length,
)

__all__ = ["LogBuffers"]

_ZERO_CHUNK = 1 << 20


def _usable_space(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


_SPACE_RECHECK_EVERY = 32
_SPACE_SLACK = 256 << 20
_SPACE_DIRECTORIES_MAX = 16
_space: dict[str, tuple[int, int]] = {}
"""Per directory: the logs created there since its usable space was last read, and that figure less their
lengths."""


def _enough_space(directory: str, length: int) -> int | None:
    """None when ``directory`` has room for ``length`` more bytes, else the usable space it has.

    A connect storm creates a few logs per connection, and each read of the file system's figures cost a
    ``statvfs`` (slow on a busy tmpfs). So a directory's figure is read for one log in
    :data:`_SPACE_RECHECK_EVERY`, less what was created there since for the others; and for every log once that
    leaves under :data:`_SPACE_SLACK` to spare (others use the file system too)."""
    known = _space.get(directory)
    if known is not None and known[0] < _SPACE_RECHECK_EVERY and known[1] - length >= _SPACE_SLACK:
        _space[directory] = (known[0] + 1, known[1] - length)
        return None
    usable = _usable_space(directory)
    if usable < length:
        _space.pop(directory, None)
        return usable
    if directory not in _space and len(_space) >= _SPACE_DIRECTORIES_MAX:
        del _space[next(iter(_space))]
    _space[directory] = (1, usable - length)
    return None


def _fill_zeros(fd: int, length: int) -> None:
    try:
        os.posix_fallocate(fd, 0, length)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    zeros = bytes(min(_ZERO_CHUNK, length))
    written = 0
    while written < length:
        written += os.pwrite(fd, zeros[: min(len(zeros), length - written)], written)


_created: dict[str, tuple[weakref.ref[mmap.mmap], int, int]] = {}
"""The logs this process created and may still map, by file name: the mapping, the file's device and inode (a
file of that name made since, by a driver started again on the same directory, is another file)."""


def _remember(name: str, mapping: mmap.mmap, fd: int) -> None:
    status = os.fstat(fd)

    def forget(gone: weakref.ref[mmap.mmap]) -> None:
        known = _created.get(name)
        if known is not None and known[0] is gone:
            del _created[name]

    _created[name] = (weakref.ref(mapping, forget), status.st_dev, status.st_ino)


def _created_mapping(name: str) -> mmap.mmap | None:
    """The open mapping this process made of the file now at ``name``, or None."""
    known = _created.get(name)
    if known is None:
        return None
    mapping = known[0]()
    if mapping is None or mapping.closed:
        return None
    status = os.stat(name)
    if (status.st_dev, status.st_ino) != known[1:] or status.st_size != len(mapping):
        return None
    return mapping


class LogBuffers:
    """The mapped log: ``terms`` (3 AtomicBuffers), ``term_views``, ``metadata``, ``term_length``."""

    def __init__(self, path: str | os.PathLike[str], mapping: mmap.mmap, term_length: int) -> None:
        self._name = os.fspath(path)
        self.term_length = term_length
        self._mmap: mmap.mmap | None = mapping
        self._view: memoryview | None = memoryview(mapping)
        file_length = len(mapping)
        self.file_length = file_length
        self.terms: list[AtomicBuffer] = [
            AtomicBuffer(mapping, i * term_length, term_length) for i in range(PARTITION_COUNT)
        ]
        self.term_views: list[memoryview] = [
            self._view[i * term_length : (i + 1) * term_length] for i in range(PARTITION_COUNT)
        ]
        self.metadata = AtomicBuffer(mapping, file_length - LOG_META_DATA_LENGTH, LOG_META_DATA_LENGTH)
        self._closed = False

    @property
    def path(self) -> Path:
        return Path(self._name)

    @property
    def name(self) -> str:
        """The file's path as a string (what clients are told to map)."""
        return self._name

    @classmethod
    def create(cls, path: str | os.PathLike[str], term_length: int, page_size: int, sparse: bool = False) -> LogBuffers:
        """Create a new log file (it must not exist) and map it.

        Raises StorageSpaceError if the filesystem has less usable space than the
        file needs (checked up front, as 1.15.1 does, and again if allocation fails).
        Unless ``sparse``, every page is allocated now so a full disk fails here rather
        than as a SIGBUS later. The term length and page size are stamped in the
        metadata so the file can be mapped before the rest of it is initialised.
        """
        check_term_length(term_length)
        check_page_size(page_size)
        name = os.fspath(path)
        length = compute_log_length(term_length, page_size)
        directory = os.path.dirname(name) or "."
        usable = _enough_space(directory, length)
        if usable is not None:
            raise StorageSpaceError(
                f"insufficient usable storage for new log of length={length} in {directory} (usable={usable})"
            )
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            try:
                if sparse:
                    os.ftruncate(fd, length)
                else:
                    _fill_zeros(fd, length)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StorageSpaceError(
                        f"insufficient storage for new log of length={length} at {name}: {exc}"
                    ) from exc
                raise
            mapping = mmap.mmap(fd, length)
            _remember(name, mapping, fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise
        os.close(fd)
        log = cls(name, mapping, term_length)
        log.metadata.put_int(LOG_TERM_LENGTH_OFFSET, term_length)
        log.metadata.put_int(LOG_PAGE_SIZE_OFFSET, page_size)
        return log

    @classmethod
    def map(cls, path: str | os.PathLike[str]) -> LogBuffers:
        """Map an existing log file; the term length comes from its metadata (a log this process created and
        still maps: that mapping, see the module's docstring)."""
        name = os.fspath(path)
        mapping = _created_mapping(name)
        mapped_here = mapping is None
        if mapping is None:
            fd = os.open(name, os.O_RDWR)
            try:
                file_length = os.fstat(fd).st_size
                if file_length < LOG_META_DATA_LENGTH:
                    raise DriverConfigurationError("log_length", file_length, f"at least {LOG_META_DATA_LENGTH} bytes")
                mapping = mmap.mmap(fd, file_length)
            finally:
                os.close(fd)
        file_length = len(mapping)
        try:
            meta = AtomicBuffer(mapping, file_length - LOG_META_DATA_LENGTH, LOG_META_DATA_LENGTH)
            term_length = meta.get_int(LOG_TERM_LENGTH_OFFSET)
            page_size = meta.get_int(LOG_PAGE_SIZE_OFFSET)
            meta.release()
            check_term_length(term_length)
            check_page_size(page_size)
            if PARTITION_COUNT * term_length + LOG_META_DATA_LENGTH > file_length:
                raise DriverConfigurationError(
                    "log_length", file_length, f"at least 3 * term_length + {LOG_META_DATA_LENGTH}"
                )
        except BaseException:
            if mapped_here:
                mapping.close()
            raise
        return cls(name, mapping, term_length)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the buffers and unmap (idempotent).

        If payload slices handed out earlier are still alive, the mapping stays until
        they are gone; the memory is never freed under them.
        """
        if self._closed:
            return
        self._closed = True
        for term in self.terms:
            term.release()
        self.metadata.release()
        # A payload slice a caller still holds keeps its view exported: the memory is then
        # unmapped when the last slice is collected, never under it.
        for view in self.term_views:
            with contextlib.suppress(BufferError):
                view.release()
        if self._view is not None:
            with contextlib.suppress(BufferError):
                self._view.release()
            self._view = None
        mapping = self._mmap
        self._mmap = None
        if mapping is not None:
            with contextlib.suppress(BufferError):
                mapping.close()

    def __enter__(self) -> LogBuffers:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
