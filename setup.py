"""Build hook for the native modules: atomic operations over shared memory, datagram I/O for the driver, and the
end points' message codec (its common case; the Python codec stands in when it is not built)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "driver.concurrent._atomic",
            ["src/driver/concurrent/_atomic.c"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "driver.media._net",
            ["src/driver/media/_net.c"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "endpoint._codec",
            ["src/endpoint/_codec.c"],
            extra_compile_args=["-O2"],
        ),
    ]
)
