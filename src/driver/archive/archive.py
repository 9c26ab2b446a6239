"""Running an archive: beside an existing driver, or together with one (an archiving driver)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

from driver.agent import AgentRunner
from driver.archive.catalog import Catalog
from driver.archive.conductor import ArchiveConductor, recover_catalog
from driver.archive.context import ArchiveContext
from driver.archive.errors import ArchiveTimeoutError
from driver.archive.mark import MarkFile
from driver.archive.operations import ArchiveOperations
from driver.archive.recorder import SyncLevel
from driver.client.aeron import Aeron
from driver.concurrent.system_counters import SystemCounterId
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from driver.idle import idle_strategy_from_name

__all__ = ["Archive", "ArchivingMediaDriver"]


class _MarkedConductor:
    """The conductor's agent, refreshing the mark file's activity timestamp once per millisecond that passes (as
    Aeron's archive conductor does), so tools can tell a live archive from a dead one."""

    def __init__(self, conductor: ArchiveConductor, mark: MarkFile) -> None:
        self.conductor = conductor
        self.role_name = conductor.role_name
        self._mark = mark
        self._last_ms = 0

    def on_start(self) -> None:
        self.conductor.on_start()

    def do_work(self) -> int:
        now_ms = int(time.time() * 1000)
        if now_ms != self._last_ms:
            self._last_ms = now_ms
            self._mark.update_activity_timestamp(now_ms)
        return self.conductor.do_work()

    def on_close(self) -> None:
        self.conductor.on_close()


class Archive(ArchiveOperations):
    """An archive agent on its own thread, with its own client of the driver in ``context.aeron_dir``.

    The methods are the archive's operations for callers in the same process;
    other processes use :class:`~driver.archive.client.ArchiveClient` over the
    control channel. Each waits for the conductor's answer at most ``timeout`` s.
    """

    def __init__(self, context: ArchiveContext) -> None:
        self.context = context.conclude()
        self.timeout = 10.0
        self._mark = MarkFile(
            context.archive_dir,
            context.control_channel,
            control_stream_id=context.control_stream_id,
            events_channel=context.recording_events_channel,
            events_stream_id=context.recording_events_stream_id,
            aeron_directory=str(context.aeron_dir),
        )
        self._aeron: Aeron | None = None
        self._catalog: Catalog | None = None
        self._runner: AgentRunner | None = None
        try:
            self._catalog = Catalog(
                context.archive_dir,
                sync=context.catalog_file_sync_level > SyncLevel.NONE,
                max_entries=context.max_catalog_entries,
            )
            self.recovered = recover_catalog(self._catalog, context.archive_dir)
            self._aeron = Aeron.connect(
                aeron_dir=context.aeron_dir, use_conductor_agent_invoker=True, error_handler=context.error_handler
            )
            self.conductor = ArchiveConductor(context, self._aeron, self._catalog)
            self._runner = AgentRunner(
                _MarkedConductor(self.conductor, self._mark),
                idle_strategy_from_name(context.idle_strategy),
                context.error_handler,
            )
            self._runner.start()
        except BaseException:
            self.close()
            raise

    @classmethod
    def launch(cls, context: ArchiveContext | None = None, **overrides: Any) -> Archive:
        """Start an archive (settings from the environment, then ``overrides``)."""
        if context is None:
            context = ArchiveContext.from_env(**overrides)
        elif overrides:
            context = ArchiveContext.from_env({}, **{**_fields(context), **overrides})
        return cls(context)

    def _call(self, fn: Callable[[], Any], timeout: float) -> Any:
        future = self.conductor.submit(fn)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ArchiveTimeoutError(f"archive did not answer within {timeout}s") from None

    def _request(self, operation: str, *args: Any) -> Any:
        method = self.conductor.operation(operation)
        return self._call(lambda: method(*args), self.timeout)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the archive thread, then release its client, catalog and directory.

        If the thread does not stop within ``timeout_s`` (it is stuck in a call), nothing it uses is released:
        the resources leak (with a warning from the runner) rather than vanish under a running thread.
        """
        if self._runner is not None:
            if not self._runner.close(timeout_s):
                return
            self._runner = None
        if self._aeron is not None:
            self._aeron.close()
            self._aeron = None
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
        self._mark.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fields(context: ArchiveContext) -> dict[str, object]:
    import attrs

    return attrs.asdict(context, recurse=False)


def _into_driver_error_log(
    driver: MediaDriver, handler: Callable[[BaseException], None]
) -> Callable[[BaseException], None]:
    """The archive's errors counted and kept in the driver's distinct error log (cnc.dat), as Aeron 1.15.1's
    archiving driver keeps them, so ``python -m driver.archive errors <dir>`` and ErrorStat show them; then
    ``handler``."""
    conductor = driver.conductor
    counter = conductor.system_counters.get(SystemCounterId.ERRORS)

    def record(error: BaseException) -> None:
        counter.increment()
        conductor.error_log.record(error)
        handler(error)

    return record


class ArchivingMediaDriver:
    """A media driver and an archive in one process, the archive using that driver."""

    def __init__(self, driver: MediaDriver, archive: Archive) -> None:
        self.driver = driver
        self.archive = archive

    @classmethod
    def launch(
        cls, driver_context: DriverContext | None = None, archive_context: ArchiveContext | None = None
    ) -> ArchivingMediaDriver:
        driver = MediaDriver.launch(driver_context)
        try:
            base = archive_context or ArchiveContext.from_env()
            archive = Archive.launch(
                base,
                aeron_dir=driver.context.aeron_dir,
                error_handler=_into_driver_error_log(driver, base.error_handler),
            )
        except BaseException:
            driver.close()
            raise
        return cls(driver, archive)

    def close(self) -> None:
        try:
            self.archive.close()
        finally:
            self.driver.close()

    def __enter__(self) -> ArchivingMediaDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
