from collections.abc import Callable
from typing import Any

from typing_extensions import Buffer

class Codec:
    def __init__(
        self,
        typed: dict[type, bytes],
        encode: Callable[[Any], bytes],
        decoders: dict[int, Callable[[Any], object]],
        slow_encode: Callable[[object], bytes],
        slow_decode: Callable[[Any], object],
        error: type[Exception],
        /,
    ) -> None: ...
    def encode(self, message: object, /) -> bytes: ...
    def decode(self, data: Buffer, /) -> object: ...
