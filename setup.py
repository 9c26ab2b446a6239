"""Build hook for the one native module: atomic operations over shared memory."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "driver.concurrent._atomic",
            ["src/driver/concurrent/_atomic.c"],
            extra_compile_args=["-O2"],
        )
    ]
)
