"""The space reserved ahead of the appends (log.py's docstring, "Preallocation", says why and
what recovery makes of it): the step, and one reservation, for the live file and for
compaction's side file alike.
"""

from __future__ import annotations

from .files import OsFiles

# The file grows in steps of this many bytes, reserved ahead of the appends (posix_fallocate): an
# append then neither grows the file nor makes its fdatasync write the inode (bench/README.md,
# "Numbers the code's comments used to carry", has what that saves).
PREALLOCATE = 4 << 20


def reserve(files: OsFiles, fd: int, size: int, need: int, step: int) -> int:
    """Reserve the file `fd`, now `size` bytes, up to `need` and on to the next multiple of
    `step` past it; answer its new size. Raises OSError where the OS or the disk cannot."""
    target = (need // step + 1) * step
    files.allocate(fd, size, target - size)
    return target
