"""High-level asyncio Server/Client end points over the driver."""
