"""Network media: UDP channel parsing (and, from the lead, the transports built on it)."""

from __future__ import annotations

from driver.media.udp_channel import InterfaceSearchAddress, UdpChannel, destination_address, resolve_host

__all__ = ["InterfaceSearchAddress", "UdpChannel", "destination_address", "resolve_host"]
