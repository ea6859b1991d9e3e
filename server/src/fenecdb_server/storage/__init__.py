"""Storage: the data file as a log of checksummed records, its sync policies, recovery and
compaction. The format and the recovery algorithm are documented at the top of `log.py`.

It holds opaque payloads; it imports nothing from the engine, the database or http.
"""

from __future__ import annotations

from .failure import CorruptLog, StorageFailed
from .files import OsFiles
from .log import Log
from .sync import describe, parse_policy

__all__ = ["CorruptLog", "Log", "OsFiles", "StorageFailed", "describe", "parse_policy"]
