"""One handle over the three drivers a client suite can run against.

``java`` is Aeron's own 1.15.1 MediaDriver, ``embedded`` our ``MediaDriver`` in the
test process, ``process`` our ``python -m driver``. Tests see the directory and a
way to make the driver vanish the way a crash would (SIGKILL; the embedded one
stops its agents and leaves its files, which is what a client can observe of a crash).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AnyDriver"]


@dataclass(frozen=True)
class AnyDriver:
    kind: str
    aeron_dir: Path
    kill: Callable[[], None]
    pid: int

    @property
    def cnc_path(self) -> Path:
        return self.aeron_dir / "cnc.dat"
