"""An Aeron-style media driver and client in Python.

``MediaDriver`` runs the driver (embedded with ``launch_embedded``, or
``python -m driver`` for a standalone one); ``driver.client.Aeron`` connects to it.
"""

import logging as _logging

from driver.config import ClientContext, DriverContext, ThreadingMode
from driver.core.media_driver import MediaDriver
from driver.errors import DriverError

__all__ = ["ClientContext", "DriverContext", "DriverError", "MediaDriver", "ThreadingMode"]

if not any(isinstance(h, _logging.NullHandler) for h in _logging.getLogger("driver").handlers):
    # A library logs, the application decides where to: without a handler of its own configured, nothing
    # falls through to logging's last-resort stderr handler.
    _logging.getLogger("driver").addHandler(_logging.NullHandler())
