"""Operator tools for a driver directory: ``python -m driver.tools`` / ``aeron-tools`` (see :mod:`driver.tools.cli`)."""

from __future__ import annotations

__all__: list[str] = []
