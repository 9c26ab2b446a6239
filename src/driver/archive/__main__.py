"""``python -m driver.archive``: run an archive beside a driver, or an archiving driver (both in this process); or,
with a verb, inspect an archive directory (``describe``, ``dump``, ``verify``, ``errors``, ... see
:mod:`driver.archive.catalog_tool`)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from driver.archive import catalog_tool
from driver.archive.archive import Archive, ArchivingMediaDriver
from driver.archive.context import ArchiveContext
from driver.config import DriverContext
from driver.logs import log_warnings_to_stderr


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m driver.archive",
        description="Run an archive of recorded streams. To inspect an archive directory instead: "
        f"python -m driver.archive {{{','.join(catalog_tool.VERBS)}}} <archive dir> [arg].",
    )
    p.add_argument("--archive-dir", help="where recordings and the catalog live (aeron.archive.dir)")
    p.add_argument("-d", "--aeron-dir", help="the driver's directory (aeron.dir)")
    p.add_argument("--with-driver", action="store_true", help="also run a media driver in this process")
    p.add_argument("--segment-file-length", help="aeron.archive.segment.file.length (e.g. 128m)")
    p.add_argument("--file-sync-level", help="aeron.archive.file.sync.level: 0 none, 1 data, 2 data and metadata")
    p.add_argument("--control-channel", help="aeron.archive.control.channel")
    p.add_argument("--control-stream-id", help="aeron.archive.control.stream.id")
    p.add_argument("--max-catalog-entries", help="aeron.archive.max.catalog.entries (the catalog's initial room)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and (words[0] in catalog_tool.VERBS or (len(words) > 1 and words[1] in catalog_tool.VERBS)):
        return catalog_tool.run(words)
    args = _parser().parse_args(words)
    log_warnings_to_stderr()
    overrides = {
        name: value
        for name, value in (
            ("archive_dir", args.archive_dir),
            ("aeron_dir", args.aeron_dir),
            ("segment_file_length", args.segment_file_length),
            ("file_sync_level", args.file_sync_level),
            ("control_channel", args.control_channel),
            ("control_stream_id", args.control_stream_id),
            ("max_catalog_entries", args.max_catalog_entries),
        )
        if value is not None
    }
    if isinstance(overrides.get("file_sync_level"), str):
        overrides["file_sync_level"] = int(str(overrides["file_sync_level"]))
    context = ArchiveContext.from_env(**overrides)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    if args.with_driver:
        driver_context = DriverContext.from_env(aeron_dir=context.aeron_dir) if args.aeron_dir else None
        host: Archive | ArchivingMediaDriver = ArchivingMediaDriver.launch(driver_context, context)
    else:
        host = Archive.launch(context)
    with host:
        print(f"archive ready: {context.archive_dir} (driver {context.aeron_dir})", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
