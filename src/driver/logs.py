"""How the package's own programs log (the library itself only carries a NullHandler; see ``driver``)."""

from __future__ import annotations

import logging

__all__ = ["log_warnings_to_stderr"]


def log_warnings_to_stderr() -> None:
    """For ``python -m driver``, ``python -m driver.archive`` and the tools: warnings and errors on stderr, as an
    application would configure them."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
