"""Run every test of every part whose toolchain is present; `make test` calls this.

The first parts are the checks (`make check` runs only those, `--check`): ruff and mypy over
every Python part we write by hand (the server, the Python client,
the conformance driver, the benchmarks, these scripts), `tsc --noEmit --strict` over the
JavaScript SDK and `go vet` over the Go SDK. A finding fails its part, as a failing test does.

A part is a folder with a test entry point. A part whose toolchain is missing, or that
holds only its README so far, prints a loud `SKIP <part>: <reason>` line and is counted
as skipped, never as passed. The last line is `parts: N passed, M failed, K skipped`,
and the exit status is non-zero when any part failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"

# part name, folder, the commands its toolchain needs, how to run it
CLIENTS = [
    ("js", "clients/js", ["node", "npm"]),
    ("go", "clients/go", ["go"]),
    ("kotlin", "clients/kotlin", ["mvn", "java"]),
    ("dotnet", "clients/dotnet", ["dotnet"]),
    ("swift", "clients/swift", ["swift"]),
    ("dart", "clients/dart", ["dart"]),
]


def run(name: str, cmd: list[str], cwd: Path = ROOT, extra_env: dict[str, str] | None = None) -> bool:
    shown = " ".join(f"{k}={v}" for k, v in (extra_env or {}).items())
    print(f"\n=== {name}: {shown + ' ' if shown else ''}{' '.join(cmd)}", flush=True)
    started = time.monotonic()
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(extra_env or {}))
    code = subprocess.call(cmd, cwd=cwd, env=env)
    print(f"=== {name}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {time.monotonic() - started:.1f} s",
          flush=True)
    return code == 0


COMPILED_CHECK = ("import sys; import fenecdb_server.engine.engine as e; from fenecdb_server import compiled; "
                  "print('the engine runs from', e.__file__); sys.exit(0 if compiled.running() else "
                  "'the engine was installed as pure Python: the install said why (server/setup.py)')")

# What ruff and mypy read: every Python part (all written by hand).
PY_CHECKED = ["server", "clients/python", "conformance", "bench", "scripts"]
MYPY_CHECKED = ["server/src/fenecdb_server", "server/profile_training.py", "conformance", "bench", "scripts"]
# the Python client is checked as its users' code sees it: mypy --strict, as its own test_types does
MYPY_STRICT = ["--strict", "clients/python/src/fenecdb"]


def checks(record: Any, skip: Any) -> None:
    """Lint and types of every part whose toolchain is present: one counted part each."""
    ruff, mypy = str(VENV_BIN / "ruff"), str(VENV_BIN / "mypy")
    record("check-ruff", run("check-ruff", [ruff, "check", *PY_CHECKED]))
    record("check-mypy", run("check-mypy", [mypy, *MYPY_CHECKED]))
    record("check-mypy-client", run("check-mypy-client", [mypy, *MYPY_STRICT]))
    js = ROOT / "clients/js"
    if shutil.which("node") is None or shutil.which("npm") is None:
        skip("check-tsc", "no 'node' on PATH")
    else:
        record("check-tsc", run("check-tsc", ["bash", "-c", "{ [ -d node_modules/typescript ] && "
                                              "[ ! package-lock.json -nt node_modules/.package-lock.json ]; } "
                                              "|| npm ci --no-audit --no-fund --loglevel=error; "
                                              "npx --no-install tsc --noEmit --strict -p tsconfig.json"], cwd=js))
    if shutil.which("go") is None:
        skip("check-vet", "no 'go' on PATH")
    else:
        record("check-vet", run("check-vet", ["go", "vet", "./..."], cwd=ROOT / "clients/go"))


def main() -> int:
    only_checks = "--check" in sys.argv[1:]
    passed: list[str] = []
    failed: list[str] = []
    skipped: list[str] = []

    def record(name: str, ok: bool) -> None:
        (passed if ok else failed).append(name)

    def skip(name: str, why: str) -> None:
        print(f"SKIP {name}: {why}", flush=True)
        skipped.append(name)

    checks(record, skip)
    if only_checks:
        return summary(passed, failed, skipped)

    python = str(VENV_BIN / "python")
    # the install compiles the engine's hot modules (server/setup.py): say so, or why not
    if shutil.which("cc") or shutil.which("gcc"):
        record("server-compiled", run("server-compiled", [python, "-c", COMPILED_CHECK]))
    else:
        skip("server-compiled", "no C compiler on PATH: the engine was installed as pure Python")
    # two at a time (pytest-xdist): most of the suite waits on servers it started (server/README.md, Tests)
    record("server", run("server", [python, "-m", "pytest", "-n", "2", "server/tests"]))
    # the tests that replace a function inside the engine, on its sources (conftest.py: `sources`)
    record("server-sources", run("server-sources", [python, "-m", "pytest", "-m", "sources", "server/tests"],
                                 extra_env={"FENECDB_PURE_PYTHON": "1"}))
    # failover through etcd (server/tests_cluster): a real etcd (Debian's etcd-server) and three servers,
    # 20 SIGKILL failovers among the faults; a few minutes. Its network faults are made in namespaces
    # (root and `ip`), else through fault proxies: its first line says which, and why
    if shutil.which("etcd") is None:
        skip("failover", "no 'etcd' on PATH")
    else:
        record("failover", run("failover", [python, "-m", "pytest", "server/tests_cluster"],
                               extra_env={"FENEC_FAILOVERS": "20"}))
    # the queue-compare table's statistics and writer (no peer server needed), and the reading of a
    # callgrind dump by bench/server_cost.py
    record("bench", run("bench", [python, "-m", "pytest", "bench/compare", "bench/test_server_cost.py"]))

    if (ROOT / "clients/python/pyproject.toml").exists():
        record("python", run("python", [python, "-m", "pytest", "clients/python/tests"]))
    else:
        skip("python", "clients/python holds only its README so far")

    for name, folder, tools in CLIENTS:
        script = ROOT / folder / "test.sh"
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            skip(name, f"no '{missing[0]}' on PATH")
        elif not script.exists():
            skip(name, f"{folder} holds only its README so far")
        else:
            record(name, run(name, ["bash", str(script)], cwd=ROOT / folder))

    # the dashboard clicked through in a real browser: the system Chromium (Debian's package)
    chromium = os.environ.get("FENEC_CHROMIUM", "/usr/bin/chromium")
    missing = [t for t in ("node", "npm") if shutil.which(t) is None]
    if missing:
        skip("dashboard", f"no '{missing[0]}' on PATH")
    elif not os.access(chromium, os.X_OK):
        skip("dashboard", "no chromium (apt-get install chromium)")
    else:
        record("dashboard", run("dashboard", ["bash", "server/tests/browser/test.sh"]))

    driver = ROOT / "conformance" / "run.py"
    if driver.exists():
        # the fault driver's own tests (its proxy mode by mode, its checks on made-up events), before the suite
        record("fault-driver", run("fault-driver", [python, "-m", "pytest", "conformance"]))
        record("conformance", run("conformance", [python, str(driver)]))
        # every SDK's recorded requests answered as when they were recorded (conformance/wire/README.md):
        # the HTTP front held for the SDKs whose toolchains are missing here
        server_cmd = f"{VENV_BIN / 'fenec-server'} --file {{file}} --http 127.0.0.1:{{port}}"
        # four files at a time, each against its own server: a replay mostly waits out its recorded gaps
        record("wire", run("wire", [python, str(ROOT / "conformance/wire/replay.py"), "--jobs", "4",
                                    "--server-cmd", server_cmd]))
    else:
        skip("conformance", "the suite is not built yet (conformance/ holds only its README)")

    return summary(passed, failed, skipped)


def summary(passed: list[str], failed: list[str], skipped: list[str]) -> int:
    for name in failed:
        print(f"FAILED {name}")
    print(f"parts: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
