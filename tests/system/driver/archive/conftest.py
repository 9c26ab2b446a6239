"""Fixtures for the archive system tests: archive directories, in-process archives, archive processes."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from archive_helpers import ArchiveHarness, ArchiveProcess

from driver.core.media_driver import MediaDriver


def _unique_dir(tag: str) -> Path:
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path("/tmp")
    return base / f"endpoint-archive-{tag}-{os.getpid()}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def archive_dir() -> Iterator[Path]:
    """A unique, not yet existing archive directory (under /dev/shm when possible), removed afterwards."""
    path = _unique_dir("arch")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_archive(media_driver: MediaDriver, archive_dir: Path) -> Iterator[Callable[..., ArchiveHarness]]:
    """Start an archive beside the embedded driver (settings as keyword arguments); all closed afterwards."""
    started: list[ArchiveHarness] = []

    def make(**settings: Any) -> ArchiveHarness:
        settings.setdefault("archive_dir", archive_dir)
        directory = settings.pop("archive_dir")
        harness = ArchiveHarness(media_driver.aeron_dir, directory, **settings)
        started.append(harness)
        return harness

    yield make
    for harness in reversed(started):
        harness.close()


@pytest.fixture
def harness(make_archive: Callable[..., ArchiveHarness]) -> ArchiveHarness:
    """An archive with 64 KiB segments beside the embedded driver."""
    return make_archive()


@pytest.fixture
def archive_processes() -> Iterator[list[ArchiveProcess]]:
    """Archive processes a test started; each is stopped by pid (killed if it does not stop) afterwards."""
    started: list[ArchiveProcess] = []
    yield started
    for process in reversed(started):
        process.stop()
