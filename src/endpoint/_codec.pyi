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
    def dispatch(
        self,
        view: memoryview,
        frames: list[tuple[int, int, int]],
        resolved: dict[type, tuple[tuple[Callable[[Any, Any], Any], ...], bool]],
        inbox: Any,
        connection: object,
        on_frame: Callable[[memoryview, int], object],
        on_decoded: Callable[[Any, int], object],
        on_result: Callable[[Any, Any], object],
        on_error: Callable[[BaseException], object],
        core: object,
        /,
    ) -> None: ...
