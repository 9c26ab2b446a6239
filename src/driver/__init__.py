"""An Aeron-style media driver and client in Python.

``MediaDriver`` runs the driver (embedded with ``launch_embedded``, or
``python -m driver`` for a standalone one); ``driver.client.Aeron`` connects to it.
"""

from driver.config import ClientContext, DriverContext, ThreadingMode
from driver.core.media_driver import MediaDriver
from driver.errors import DriverError

__all__ = ["ClientContext", "DriverContext", "DriverError", "MediaDriver", "ThreadingMode"]
