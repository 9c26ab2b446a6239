"""Build hook for the native modules, each beside the Python it accelerates.

``driver.concurrent._atomic`` (atomic access to shared buffers), ``driver.concurrent._watches`` (many positions
checked in one call), ``driver.logbuffer._frames`` (frame writes, the offer and term scans),
``driver.wire._datagrams`` (the DATA/PAD datagram check), ``driver.media._net`` (datagram I/O, the batched receive and
the send side's status messages) and
``endpoint._codec`` (the end points' message codec in its common case; the Python codec stands in when it is not
built). The first three and ``_net`` share AtomicBuffer's layout through ``_atomic_buffer.h``.
"""

from setuptools import Extension, setup

_ATOMIC_BUFFER_H = "src/driver/concurrent/_atomic_buffer.h"


_DATA_CHECK_H = "src/driver/wire/_data_check.h"
_REBUILD_H = "src/driver/logbuffer/_rebuild.h"
_FEEDBACK_H = "src/driver/media/_feedback.h"
_SEND_H = "src/driver/media/_send.h"


def _native(name: str, source: str, *, atomic_buffer: bool = False, headers: tuple[str, ...] = ()) -> Extension:
    return Extension(
        name,
        [source],
        depends=([_ATOMIC_BUFFER_H] if atomic_buffer else []) + list(headers),
        extra_compile_args=["-O2"],
    )


setup(
    ext_modules=[
        _native("driver.concurrent._atomic", "src/driver/concurrent/_atomic.c", atomic_buffer=True),
        _native("driver.concurrent._watches", "src/driver/concurrent/_watches.c", atomic_buffer=True),
        _native(
            "driver.logbuffer._frames", "src/driver/logbuffer/_frames.c", atomic_buffer=True, headers=(_REBUILD_H,)
        ),
        _native("driver.wire._datagrams", "src/driver/wire/_datagrams.c", headers=(_DATA_CHECK_H,)),
        _native(
            "driver.media._net",
            "src/driver/media/_net.c",
            atomic_buffer=True,
            headers=(_DATA_CHECK_H, _REBUILD_H, _FEEDBACK_H, _SEND_H),
        ),
        _native("endpoint._codec", "src/endpoint/_codec.c"),
    ]
)
