"""The conformance driver behind `make conformance` and `make conformance-vectors`.

    conformance/run.py                 start .venv/bin/fenec-server in memory on 127.0.0.1:0, then run
                                       every present SDK's vectors and scenarios against it
    conformance/run.py --vectors-only  no server: the builder vectors only (every scenario is skipped)

SDKs run in the order python, js, go, dotnet, swift, kotlin, dart. Python is run by this
driver with its own runner (python_runner.py); every other SDK runs when its toolchain is on
PATH and it has `clients/<sdk>/conformance.sh`, with cwd clients/<sdk> and FENEC_VECTORS,
FENEC_SCENARIOS (absolute), FENEC_ONLY, and for a full run FENEC_URL and
FENEC_REQUIRE_SERVER=1. Each prints exactly one line `<sdk>: N passed, M failed`
(conformance.md C.1); the driver reads it, prints a total line worded apart from that
pattern, and exits non-zero when any SDK failed, printed no summary, or the server did not
start.

A full run also starts a primary on a file (`--replication-token`, `--sync always`) and a replica
following it, and gives every runner FENEC_PRIMARY_URL, FENEC_REPLICA_URL and FENEC_REPLICA_SCENARIOS
(replica-scenarios.json). A runner plays those cases or not: the driver tells from its case lines
(`ok <name>` / `FAIL <name>`, each case's name from the file). One that plays none is reported
`replica cases: not played` and judged on the rest; one that plays some must play them all.

Then, in a full run, the fault scenarios: for every SDK whose toolchain is present and which has
`clients/<sdk>/fault-worker.sh`, `faults.py --sdk <sdk>` (its own server on a file, behind its
proxy; two SDKs at a time, each one's output printed whole when it ends) prints `<sdk> faults: N passed, M failed`; an SDK without the script prints
`SKIP <sdk> faults: no fault-worker.sh yet`, counted as skipped, never as passed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = ROOT / ".venv" / "bin"
SUMMARY = re.compile(r"^(python|js|go|dotnet|swift|kotlin|dart): ([0-9]+) passed, ([0-9]+) failed$")
FAULTS_SUMMARY = re.compile(r"^(python|js|go|dotnet|swift|kotlin|dart) faults: ([0-9]+) passed, ([0-9]+) failed$")
LISTENING = re.compile(r"listening on: (http://\S+)")
FAULT_JOBS = 2  # SDKs whose fault scenarios run at once: each mostly waits out its faults and deadlines
SDKS: list[tuple[str, list[str]]] = [
    ("python", []),
    ("js", ["node", "npm"]),
    ("go", ["go"]),
    ("dotnet", ["dotnet"]),
    ("swift", ["swift"]),
    ("kotlin", ["mvn", "java"]),
    ("dart", ["dart"]),
]
SERVER_START_S = 60  # generous: a loaded machine starts a Python server slowly
REPLICAS = HERE / "replica-scenarios.json"


class Server:
    """`fenec-server --http 127.0.0.1:0` in memory; its address read from its `listening on:` line."""

    def __init__(self, *flags: str, env: dict[str, str] | None = None) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        self.lines: list[str] = []
        self.flags = list(flags)
        self.env = env

    def start(self) -> str | None:
        exe = BIN / "fenec-server"
        if not exe.exists():
            print(f"conformance: no server at {exe.relative_to(ROOT)}", flush=True)
            return None
        self.proc = subprocess.Popen([str(exe), "--http", "127.0.0.1:0", *self.flags], cwd=ROOT,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=self.env)
        found = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.url = m.group(1).rstrip("/")
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        found.wait(SERVER_START_S)
        if self.url is None:
            print("conformance: the server did not start; its log:", flush=True)
            for line in self.lines[-20:]:
                print(f"  {line}", flush=True)
        return self.url

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def policy_server(folder: Path) -> tuple[Server, dict[str, str]]:
    """A second server, under worker-policy.json's policy with a secret and a server token of its own,
    and the environment that tells a runner about it: FENEC_POLICY_URL, FENEC_POLICY_ROOT_TOKEN,
    FENEC_POLICY_TOKENS (a JSON object of minted tokens, by worker-policy.json's `tokens` names) and
    FENEC_POLICY_SCENARIO."""
    spec_path = HERE / "worker-policy.json"
    spec = json.loads(spec_path.read_text())
    (folder / "jobs.policy").write_text("\n".join(spec["policy"]) + "\n")
    (folder / "jwt.secret").write_text(secrets.token_urlsafe(48))
    root = secrets.token_urlsafe(24)
    env = {**os.environ, "FENEC_HTTP_TOKEN": root}
    server = Server("--jwt-secret-file", str(folder / "jwt.secret"), "--policy", str(folder / "jobs.policy"), env=env)
    url = server.start()
    if url is None:
        return server, {}
    tokens = {name: subprocess.check_output([str(BIN / "fenec-server"), "--jwt-secret-file", str(folder / "jwt.secret"),
                                             "--mint-token", json.dumps(claims)], text=True).strip()
              for name, claims in spec["tokens"].items()}
    return server, {"FENEC_POLICY_URL": url, "FENEC_POLICY_ROOT_TOKEN": root,
                    "FENEC_POLICY_TOKENS": json.dumps(tokens), "FENEC_POLICY_SCENARIO": str(spec_path)}


def replica_servers(folder: Path) -> tuple[list[Server], dict[str, str]]:
    """A primary on a file under `folder` and a replica following it (replica-scenarios.json's servers),
    and the environment that tells a runner about them (empty when one did not start)."""
    token = secrets.token_urlsafe(24)
    primary = Server("--file", str(folder / "primary.fenec"), "--sync", "always", "--replication-token", token)
    p_url = primary.start()
    if p_url is None:
        return [primary], {}
    replica = Server("--file", str(folder / "replica.fenec"), "--replica-of", p_url, "--replication-token", token)
    r_url = replica.start()
    if r_url is None:
        return [primary, replica], {}
    return [primary, replica], {"FENEC_PRIMARY_URL": p_url, "FENEC_REPLICA_URL": r_url,
                                "FENEC_REPLICA_SCENARIOS": str(REPLICAS)}


def replica_cases() -> list[str]:
    return [case["name"] for case in json.loads(REPLICAS.read_text())["cases"]]


def played(lines: list[str], names: list[str]) -> list[str]:
    """The replica cases an SDK's output has a case line for: `ok <name>...` or `FAIL <name>...`."""
    return [n for n in names if any(line.startswith((f"ok {n}", f"FAIL {n}")) for line in lines)]


def say_now(line: str) -> None:
    print(line, flush=True)


def run_sdk(name: str, cmd: list[str], cwd: Path, env: dict[str, str],
            summary: re.Pattern[str] = SUMMARY, lines: list[str] | None = None,
            say: Callable[[str], None] = say_now) -> tuple[int, int] | None:
    """Runs one SDK, echoing its output through `say` (kept in `lines` when given); answers (passed,
    failed) from its summary line, or None."""
    say(f"--- {name}: {' '.join(cmd)}")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    found: list[tuple[int, int]] = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        say(line)
        if lines is not None:
            lines.append(line)
        m = summary.match(line)
        if m and m.group(1) == name.split()[0]:
            found.append((int(m.group(2)), int(m.group(3))))
    code = proc.wait()
    say(f"--- {name}: exit {code} in {time.monotonic() - started:.1f} s")
    if len(found) != 1:
        say(f"{name} printed {len(found)} summary lines, not one")
        return None
    passed, failed = found[0]
    if (code == 0) != (failed == 0):
        say(f"{name} exited {code} with {failed} failed")
        return passed, max(failed, 1)
    return passed, failed


def missing_tool(tools: list[str], env: dict[str, str]) -> str | None:
    return next((t for t in tools if shutil.which(t, path=env["PATH"]) is None), None)


def run_faults(env: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """The fault scenarios of every SDK that has a harness, FAULT_JOBS at a time (each SDK's run has its
    own server and proxy; its output is printed whole when it ends); answers (green, red, skipped) SDK names."""
    green: list[str] = []
    red: list[str] = []
    skipped: list[str] = []
    fault_env = {k: v for k, v in env.items() if not k.startswith("FENEC_")}
    chosen: list[str] = []
    for name, tools in SDKS:
        missing = missing_tool(tools, env)
        if missing:
            print(f"SKIP {name} faults: no '{missing}' on PATH", flush=True)
            skipped.append(name)
        elif not (ROOT / "clients" / name / "fault-worker.sh").exists():
            print(f"SKIP {name} faults: no fault-worker.sh yet", flush=True)
            skipped.append(name)
        else:
            chosen.append(name)

    def one(name: str) -> tuple[tuple[int, int] | None, list[str]]:
        out: list[str] = []
        result = run_sdk(f"{name} faults", [sys.executable, str(HERE / "faults.py"), "--sdk", name], ROOT,
                         fault_env, FAULTS_SUMMARY, say=out.append)
        return result, out

    with ThreadPoolExecutor(FAULT_JOBS) as pool:
        runs = [(name, pool.submit(one, name)) for name in chosen]
        for name, run in runs:
            result, out = run.result()
            print("\n".join(out), flush=True)
            (red if result is None or result[1] > 0 else green).append(name)
    return green, red, skipped


def main(argv: list[str]) -> int:
    vectors_only = "--vectors-only" in argv
    env = {k: v for k, v in os.environ.items() if k not in ("FENEC_URL", "FENEC_REQUIRE_SERVER")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["FENEC_VECTORS"] = str(Path(os.environ.get("FENEC_VECTORS") or HERE / "builder.json").resolve())
    env["FENEC_SCENARIOS"] = str(Path(os.environ.get("FENEC_SCENARIOS") or HERE / "worker-scenarios.json").resolve())
    server = Server()
    guarded = Server()
    pair: list[Server] = []
    scratch = tempfile.TemporaryDirectory(prefix="fenec-policy-")
    server_failed = False
    if not vectors_only:
        guarded, policy_env = policy_server(Path(scratch.name))
        if policy_env:
            env.update(policy_env)
            print(f"conformance: policy server at {policy_env['FENEC_POLICY_URL']}", flush=True)
        else:
            server_failed = True
        pair, replica_env = replica_servers(Path(scratch.name))
        if replica_env:
            env.update(replica_env)
            print(f"conformance: primary at {replica_env['FENEC_PRIMARY_URL']}, "
                  f"its replica at {replica_env['FENEC_REPLICA_URL']}", flush=True)
        else:
            server_failed = True
        url = server.start()
        env["FENEC_REQUIRE_SERVER"] = "1"
        if url:
            env["FENEC_URL"] = url
            print(f"conformance: server at {url}", flush=True)
        else:
            server_failed = True
    passed_sdks: list[str] = []
    failed_sdks: list[str] = []
    skipped: list[str] = []
    names = replica_cases()
    replica_played: list[str] = []
    try:
        for name, tools in SDKS:
            lines: list[str] = []
            if name == "python":
                result = run_sdk(name, [sys.executable, str(HERE / "python_runner.py")], ROOT, env, lines=lines)
            else:
                missing = missing_tool(tools, env)
                folder = ROOT / "clients" / name
                if missing:
                    print(f"{name}: skipped (no {missing})", flush=True)
                    print(f"SKIP {name}: no '{missing}' on PATH", flush=True)
                    skipped.append(name)
                    continue
                if not (folder / "conformance.sh").exists():
                    print(f"SKIP {name}: no runner yet", flush=True)
                    skipped.append(name)
                    continue
                result = run_sdk(name, ["bash", str(folder / "conformance.sh")], folder, env, lines=lines)
            if not vectors_only and result is not None:
                seen = played(lines, names)
                if not seen:
                    print(f"{name} replica cases: not played (its runner has none yet)", flush=True)
                elif len(seen) < len(names):
                    absent = [n for n in names if n not in seen]
                    print(f"{name} replica cases: {len(seen)} of {len(names)} played; missing: {absent}", flush=True)
                    result = (result[0], max(result[1], 1))
                else:
                    print(f"{name} replica cases: {len(seen)} of {len(names)} played", flush=True)
                    replica_played.append(name)
            if result is None or result[1] > 0:
                failed_sdks.append(name)
            else:
                passed_sdks.append(name)
    finally:
        server.stop()
        guarded.stop()
        for s in reversed(pair):
            s.stop()
        scratch.cleanup()
    fault_green: list[str] = []
    fault_red: list[str] = []
    fault_skipped: list[str] = []
    if vectors_only:
        print("conformance: the fault scenarios need a server; not run with --vectors-only", flush=True)
    else:
        fault_green, fault_red, fault_skipped = run_faults(env)
    if server_failed:
        print("conformance: FAILED, the server did not start", flush=True)
    print(f"conformance total: {len(passed_sdks)} SDKs green, {len(failed_sdks)} red"
          f"{' (' + ', '.join(failed_sdks) + ')' if failed_sdks else ''}, {len(skipped)} skipped", flush=True)
    if not vectors_only:
        print(f"conformance replica cases: played by {', '.join(replica_played) or 'none'}", flush=True)
        print(f"conformance total under faults: {len(fault_green)} SDKs green, {len(fault_red)} red"
              f"{' (' + ', '.join(fault_red) + ')' if fault_red else ''}, {len(fault_skipped)} skipped"
              f"{' (' + ', '.join(fault_skipped) + ')' if fault_skipped else ''}", flush=True)
    return 1 if failed_sdks or fault_red or server_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
