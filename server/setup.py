"""The server's build: pyproject.toml says what the package is; this file adds the modules of the
request's hot path compiled to C by mypyc (mypy's compiler for type-annotated Python).

They stay plain Python in the repository, checked by mypy as the rest is, and run as they are
where they were not compiled: the interpreter loads a compiled module in place of its source
when both are there. Why, with the numbers: the README's "Compiled modules".

It also builds one module written in C, `storage/datasync_thread.c` (the fdatasync thread of
`--sync always`; `storage/sync_thread.py` says why), with the same all-or-none fallback: without it
the server syncs on the kernel's AIO or in place.

FENECDB_PURE_PYTHON=1 installs without compiling. Where the compiler is missing or fails, the
install goes on in pure Python and says so on stderr; `fenec-server` says which it runs at start.

A profile-guided build is two installs with a training run between (the Makefile's `make venv`
and `make serve`; the README's "Compiled modules" says why): FENECDB_PROFILE=generate compiles the
modules to count what runs, `profile_training.py` plays a worker's life against that server, and
FENECDB_PROFILE=use compiles them again laid out and optimized by the counts (GCC's `-fprofile-use`:
what the training ran is optimized for speed, what it never ran for size, apart). Both builds put
their objects in one place, where GCC finds each object's counts by its path. Without GCC, or
with no counts, the second build is an ordinary one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The modules every claim, ack and put runs through, from the parsed request to the log, and the
# replication path a write under --sync-replicas waits on (the primary's feed, stream and quorum, the
# replica's follower); each is compiled with every other one here (calls among them are C calls).
COMPILED = [
    "fenecdb_server/database.py",
    "fenecdb_server/engine/access.py",
    "fenecdb_server/engine/catalog.py",
    "fenecdb_server/engine/collection.py",
    "fenecdb_server/engine/controls.py",
    "fenecdb_server/engine/engine.py",
    "fenecdb_server/engine/execute.py",
    "fenecdb_server/engine/holds.py",
    "fenecdb_server/engine/parse_cache.py",
    "fenecdb_server/engine/limits.py",
    "fenecdb_server/engine/prepare.py",
    "fenecdb_server/engine/puts.py",
    "fenecdb_server/engine/queues.py",
    "fenecdb_server/engine/records.py",
    "fenecdb_server/engine/running.py",
    "fenecdb_server/engine/rwlock.py",
    "fenecdb_server/engine/schema_changes.py",
    "fenecdb_server/engine/scoped.py",
    "fenecdb_server/engine/sorted_index.py",
    "fenecdb_server/engine/sorted_ints.py",
    "fenecdb_server/held/lines.py",
    "fenecdb_server/held/looks.py",
    "fenecdb_server/held/on_asyncio.py",
    "fenecdb_server/held/row_checks.py",
    "fenecdb_server/held/time_wakes.py",
    "fenecdb_server/held/write_wakes.py",
    "fenecdb_server/plan/compile.py",
    "fenecdb_server/plan/operators.py",
    "fenecdb_server/ql/escapes.py",
    "fenecdb_server/ql/literal_nodes.py",
    "fenecdb_server/ql/literal_scan.py",
    "fenecdb_server/ql/literals.py",
    "fenecdb_server/storage/footprint.py",
    "fenecdb_server/storage/format.py",
    "fenecdb_server/storage/group_commit.py",
    "fenecdb_server/storage/log.py",
    "fenecdb_server/replication/feed.py",
    "fenecdb_server/replication/follower.py",
    "fenecdb_server/replication/link.py",
    "fenecdb_server/replication/node.py",
    "fenecdb_server/replication/quorum.py",
    "fenecdb_server/http/app.py",
    "fenecdb_server/http/asgi.py",
    "fenecdb_server/http/auth.py",
    "fenecdb_server/http/bodies.py",
    "fenecdb_server/http/busy_poll.py",
    "fenecdb_server/http/config.py",
    "fenecdb_server/http/connection.py",
    "fenecdb_server/http/cycle.py",
    "fenecdb_server/http/durable.py",
    "fenecdb_server/http/exchange.py",
    "fenecdb_server/http/intake.py",
    "fenecdb_server/http/metrics.py",
    "fenecdb_server/http/numbers.py",
    "fenecdb_server/http/protocol.py",
    "fenecdb_server/http/replication.py",
    "fenecdb_server/http/routing.py",
    "fenecdb_server/http/runner.py",
    "fenecdb_server/http/wire.py",
    "fenecdb_server/convert.py",
]

DATASYNC_THREAD = "fenecdb_server/storage/datasync_thread.c"  # a C module of its own, no Python source

PROFILE = os.environ.get("FENECDB_PROFILE", "")  # "generate", "use", or "" for an ordinary build
HERE = os.path.dirname(os.path.abspath(__file__))
PROFILE_DIR = os.path.join(HERE, "build", "profile")  # the training's counts, one file an object
PROFILE_TEMP = os.path.join(HERE, "build", "profiled")  # both builds' objects: their paths name the counts
PROFILE_FLAGS = {  # (compile, link)
    "generate": (["-fprofile-generate", "-fprofile-update=atomic", f"-fprofile-dir={PROFILE_DIR}"],
                 ["-fprofile-generate"]),
    # coverage-mismatch: mypyc's runtime is included from the build environment's path, which each
    # isolated build names anew (its functions' source locations "changed"; their counts still apply)
    "use": (["-fprofile-use", "-fprofile-correction", "-Wno-missing-profile", "-Wno-coverage-mismatch",
             f"-fprofile-dir={PROFILE_DIR}"], []),
}
# setuptools' steps that only read the package's metadata (pip's "getting requirements" and "preparing
# metadata"): they need no compiled modules, and mypycify type-checks and writes the C each time
METADATA_ONLY = {"egg_info", "dist_info"}


def _say(message: str) -> None:
    print(f"fenecdb-server build: {message}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """A compile that fails leaves the package in pure Python, said loudly, not a failed install.
    All or none: the compiled modules share one runtime library, so a part of them is removed.
    Under FENECDB_PROFILE, the profile's flags (the module's docstring)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if PROFILE:
            self.build_temp = PROFILE_TEMP

    def build_extensions(self) -> None:
        if PROFILE:
            if PROFILE not in PROFILE_FLAGS:
                raise SystemExit(f"FENECDB_PROFILE is {PROFILE!r}: generate or use")
            if not _is_gcc(self.compiler.compiler[0]):
                _say("FENECDB_PROFILE needs GCC, which is not the compiler here: an ordinary build")
            elif PROFILE == "use" and not os.path.isdir(PROFILE_DIR):
                _say(f"no training counts in {PROFILE_DIR}: an ordinary build")
            else:
                if PROFILE == "generate":  # counts of an older build would not match this one
                    shutil.rmtree(PROFILE_DIR, ignore_errors=True)
                compile_flags, link_flags = PROFILE_FLAGS[PROFILE]
                _say(f"a profile-guided build, step {PROFILE!r}")
                for ext in self.extensions:
                    ext.extra_compile_args = [*ext.extra_compile_args, *compile_flags]
                    ext.extra_link_args = [*ext.extra_link_args, *link_flags]
        super().build_extensions()

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # noqa: BLE001 - any compiler or toolchain failure
            for path in self.get_outputs():
                if os.path.exists(path):
                    os.remove(path)
            _say(f"WARNING: the compiled modules were not built ({error}); installing pure Python")


def _is_gcc(compiler: str) -> bool:
    try:
        said = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "clang" not in said.lower() and ("gcc" in said.lower() or "free software foundation" in said.lower())


def _ext_modules() -> list:
    if os.environ.get("FENECDB_PURE_PYTHON"):
        _say("FENECDB_PURE_PYTHON is set: installing pure Python")
        return []
    if METADATA_ONLY & set(sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        _say(f"WARNING: mypyc is not importable ({error}); installing pure Python")
        return []
    if sys.platform.startswith("linux"):
        # the fdatasync thread of --sync always, in C (storage/sync_thread.py says why)
        extra = [Extension("fenecdb_server.storage._datasync_thread", [os.path.join("src", DATASYNC_THREAD)])]
    else:
        extra = []
    try:  # mypy names each module from its path: src/ holds the package
        # the build's environment holds none of the runtime dependencies but uvicorn (pyproject.toml):
        # their `type: ignore`s go unused
        # (mypyc fails the build on mypy's notes too: the one about untyped functions is not asked for)
        return mypycify(["--ignore-missing-imports", "--no-warn-unused-ignores",
                         "--disable-error-code", "annotation-unchecked",
                         *(os.path.join("src", path) for path in COMPILED)], opt_level="3") + extra
    except (Exception, SystemExit) as error:  # noqa: BLE001 - mypyc exits on a type error it finds
        _say(f"WARNING: mypyc could not compile the hot modules ({error}); installing pure Python")
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
