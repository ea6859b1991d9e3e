"""The LALR tables of `grammar.lark`, kept between runs so that a start does not rebuild them.

Analysing the grammar is the largest part of a start of the server (`fenec-server --help`); lark
can save the analysed parser and load it back in a small part of that time (bench/README.md,
"Numbers the code's comments used to carry"). `build()` uses lark's own cache with a path of ours:

    $XDG_CACHE_HOME/fenecdb/  (else ~/.cache/fenecdb/)   created 0700
      parser-<sha256 of the grammar, 16 hex>.lark-cache

* The saved parser is a pickle, and loading a pickle runs code: the directory is used only when
  it belongs to this user and no one else may write in it (never a shared /tmp name that
  another user could plant first). Otherwise, or when it cannot be created, no cache.
* lark writes the SHA-256 of the grammar, the options, lark's version and Python's version at
  the top of the file and rebuilds on any mismatch; a damaged or half-written file fails to
  load and is rebuilt and rewritten (lark catches and logs that on its own "lark" logger).
* The parser loaded is the one built: the same tables, so the same trees and the same syntax
  errors (`tests/test_ops_startup.py` compares them).
* `FENEC_PARSER_CACHE=off` builds from the grammar every time.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from lark import Lark


def cache_dir() -> str | None:
    """The private directory for the cache, or None when there is no safe one."""
    if os.environ.get("FENEC_PARSER_CACHE", "").lower() == "off":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    path = os.path.join(base, "fenecdb")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return None
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return None
    if st.st_mode & 0o022:  # group or others may write: a planted file could be loaded
        return None
    return path


def cache_file(grammar: str) -> str | None:
    where = cache_dir()
    if where is None:
        return None
    digest = hashlib.sha256(grammar.encode("utf-8")).hexdigest()[:16]
    return os.path.join(where, f"parser-{digest}.lark-cache")


def build(grammar: str, **options: Any) -> Lark:
    """`Lark(grammar, **options)`, loaded from the cache when a valid one is there, else built
    (and saved for the next start when the cache directory is usable)."""
    path = cache_file(grammar)
    if path is not None:
        return Lark(grammar, cache=path, **options)
    return Lark(grammar, **options)
