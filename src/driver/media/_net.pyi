from typing_extensions import Buffer

class DatagramSocket:
    """Non-raising, GIL-keeping datagram I/O on a non-blocking socket it does not own."""

    def __init__(self, fd: int, family: int) -> None: ...
    @property
    def fd(self) -> int: ...
    def recvfrom_into(self, buffer: Buffer, /) -> tuple[int, tuple[str, int]] | None:
        """(length, address) of one datagram, or None when nothing is waiting; OSError otherwise.

        IPv6 sockets give ``(host, port, flowinfo, scope_id)`` addresses.
        """
    def sendto(self, data: Buffer, address: tuple[str, int] | tuple[str, int, int, int], /) -> int:
        """Bytes sent; -1 when the kernel would block; -2 when the host is not numeric; OSError otherwise."""
    def detach(self) -> None:
        """Forget the descriptor; later calls raise OSError(EBADF)."""
