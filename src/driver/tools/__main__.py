"""``python -m driver.tools``: same as the ``aeron-tools`` console script."""

from __future__ import annotations

from driver.tools.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
