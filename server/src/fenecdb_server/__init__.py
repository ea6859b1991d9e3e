"""FenecDB job queues: a FenecQL database server.

    from fenecdb_server import Database, FenecError
"""

from __future__ import annotations

from .database import Database
from .errors import FenecError

__version__ = "0.1.0"
__all__ = ["Database", "FenecError", "__version__"]
