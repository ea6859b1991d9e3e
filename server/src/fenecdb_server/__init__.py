"""FenecDB job queues: a FenecQL database server.

    from fenecdb_server import Database, FenecError
"""

from __future__ import annotations

from .compiled import prefer_sources

prefer_sources()  # FENECDB_PURE_PYTHON=1: the sources, not the compiled modules (compiled.py)

from .database import Database  # noqa: E402
from .errors import FenecError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Database", "FenecError", "__version__"]
