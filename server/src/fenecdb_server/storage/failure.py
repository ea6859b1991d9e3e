"""The storage layer's two refusals, both `FenecError`s of kind `io` (HTTP 500).

    FenecError (kind "io", status 500)
      StorageFailed   the disk refused a write or an fsync; this and every later write is
                      refused until the process restarts (message contains "refused")
      CorruptLog      the file fails its checks somewhere other than a torn tail; it is not
                      opened. `.offset` is the byte where the bad record starts.

`reason(error)` is how an OS error reads inside their messages and the storage logger's lines.
"""

from __future__ import annotations

from ..errors import FenecError


class StorageFailed(FenecError):
    """The disk refused a write or an fsync: the log takes no more writes."""

    def __init__(self, message: str) -> None:
        super().__init__("io", message)


class CorruptLog(FenecError):
    """The file is damaged before its end (or is not a FenecDB log at all)."""

    __slots__ = ("offset",)

    def __init__(self, offset: int, why: str) -> None:
        super().__init__("io", f"corrupt log at offset {offset}: {why}")
        self.offset = offset


def reason(error: BaseException) -> str:
    """An OS error as the messages name it: its words and errno, else whatever it says."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} (errno {error.errno})"
    return str(error) or type(error).__name__
