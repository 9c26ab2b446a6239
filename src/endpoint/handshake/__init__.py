"""How a client and a server become a connection.

:mod:`~endpoint.handshake.protocol`: the handshake's messages and its server and client state machines (pure:
bytes and time in, packets and events out); :mod:`~endpoint.handshake.noise`: the Noise patterns they run on;
:mod:`~endpoint.handshake.keystore`: the server's key and the clients' pins, on disk; and
:mod:`~endpoint.handshake.routes`: the clients' handshake publications and answer subscriptions, shared per loop.
"""
