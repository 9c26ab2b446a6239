"""Remote objects over a connection: exposing objects by id, calling them through typed proxies.

:mod:`endpoint.rpc.calls` holds the calls and their answers; :mod:`endpoint.rpc.correlation` the bounded pool of
call ids they wait under. What an application uses is here (and in :mod:`endpoint`).
"""

from endpoint.rpc.calls import (
    ConnectionRpc,
    RpcPeer,
    RpcRegistry,
    current_connection,
    oneway,
    remote_error,
    with_timeout,
)

__all__ = [
    "ConnectionRpc",
    "RpcPeer",
    "RpcRegistry",
    "current_connection",
    "oneway",
    "remote_error",
    "with_timeout",
]
