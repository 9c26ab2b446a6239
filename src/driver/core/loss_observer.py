"""Records each image's losses in the loss report (``loss-report.dat``), as Aeron's driver does.

Called on the receiver thread when an image detects a gap: the first gap of an
image creates its entry (channel, source, session, stream), later ones add an
observation and the bytes lost. A full report stops recording, as in Aeron.
"""

from __future__ import annotations

from driver.clock import EpochClock
from driver.concurrent.loss_report import LossReport, ReportEntry
from driver.core.publication_image import PublicationImage

__all__ = ["LossObserver"]


class LossObserver:
    def __init__(self, report: LossReport, clock: EpochClock) -> None:
        self._report = report
        self._clock = clock
        self._entries: dict[int, ReportEntry | None] = {}

    def __call__(self, image: PublicationImage, term_id: int, length: int) -> None:
        now_ms = self._clock.time_ms()
        key = image.correlation_id
        if key in self._entries:
            entry = self._entries[key]
            if entry is not None:
                self._report.record_observation(entry, length, now_ms)
            return
        self._entries[key] = self._report.create_entry(
            length, now_ms, image.session_id, image.stream_id, image.channel, f"/{image.source_identity}"
        )
