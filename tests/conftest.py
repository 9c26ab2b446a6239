"""Fixtures shared by every suite: unique Aeron directories and the real Aeron Java peer."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.aeron_java import AeronJava, JavaMediaDriver, start_java_media_driver


def _shm_base() -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return Path(tempfile.gettempdir())


@pytest.fixture(scope="session")
def aeron_java() -> AeronJava:
    """Java 11 + aeron-all-1.15.1.jar, installed into the peer cache on first use."""
    return AeronJava.ensure()


@pytest.fixture
def aeron_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A unique, not yet existing Aeron directory (under /dev/shm when possible), removed afterwards."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:48]
    path = _shm_base() / f"endpoint-{name}-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def java_media_driver(aeron_java: AeronJava, aeron_dir: Path, tmp_path: Path) -> Iterator[JavaMediaDriver]:
    """A Java 1.15.1 MediaDriver (SHARED threading) on ``aeron_dir``, ready, stopped by pid afterwards."""
    driver = start_java_media_driver(aeron_java, aeron_dir, tmp_path / "java-media-driver.log")
    try:
        yield driver
    finally:
        AeronJava.stop(driver.process)
