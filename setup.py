"""Build hook for the native modules: atomic operations over shared memory, and datagram I/O for the driver."""

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
    ]
)
