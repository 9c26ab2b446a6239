"""An Aeron-style media driver and client in Python."""
