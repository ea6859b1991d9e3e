"""Which modules run compiled, and the switch that runs the sources instead.

The install compiles the hot path's modules with mypyc (setup.py; the README's "Compiled
modules"). The interpreter then loads each compiled module in place of its source. Set
FENECDB_PURE_PYTHON=1 in the environment before the package is imported and every module is
loaded from its `.py` source instead, compiled or not: the tests that replace a function inside
the engine to inject a fault (a compiled module calls its neighbours directly, past any
replacement) run that way, and so can anyone who wants to step through the engine in a debugger.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

PACKAGE = __name__.rpartition(".")[0]
PURE_ENV = "FENECDB_PURE_PYTHON"


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Finds the package's modules as their `.py` files, ahead of the compiled ones beside them."""

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + ".") or path is None:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:  # type: ignore[attr-defined]
            source = os.path.join(folder, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def prefer_sources() -> None:
    """Under FENECDB_PURE_PYTHON, load the package's modules from source from here on."""
    if os.environ.get(PURE_ENV) and not any(isinstance(f, _SourcesFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourcesFirst())


def stale() -> list[str]:
    """The compiled modules loaded whose source was changed after they were built: they run the
    old code (an editable install compiles once; `make` compiles again when a source changes)."""
    out = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if not name.startswith(PACKAGE + ".") or path.endswith(".py"):
            continue
        source = os.path.join(os.path.dirname(path), os.path.basename(path).split(".", 1)[0] + ".py")
        if os.path.exists(source) and os.path.getmtime(source) > os.path.getmtime(path):
            out.append(name)
    return sorted(out)


def running() -> bool:
    """True where the engine runs compiled (its module was loaded from a native extension)."""
    module = sys.modules.get(PACKAGE + ".engine.engine")
    if module is None:
        return False
    return not (getattr(module, "__file__", None) or "").endswith(".py")
