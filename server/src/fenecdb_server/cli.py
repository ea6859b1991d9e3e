"""`fenec-server`: the command line of server.md §1, start-up (§4), shutdown (§6), logging (§8).

Exit statuses: 0 after a signal, `--help` or a good `--ping`; 1 when the file cannot be opened,
the listener cannot bind or `--ping` fails; 2 for bad flags (a flag not in this project, or
not built yet, is refused by name: never accepted silently). The flags, their defaults and
`--help`'s lines are the table of `flags.py`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import compiled
from .flags import DEFAULTS, FLAGS, SWITCHES, VALUE_FLAGS, BadFlag, given, seconds, whole
from .plan.schema import did_you_mean

if TYPE_CHECKING:
    from .database import Database

USAGE = """usage: fenec-server [--file <path>] [--http <addr>] [options]
       fenec-server --ping [--http <addr>]
       fenec-server --mint-token '<claims JSON>' (--jwt-secret <s> | --jwt-secret-file <p>)
       fenec-server --help"""

NEXT_TIER = {"--jwt-keys", "--max-memory", "--audit", "--metrics"}
NOT_IN_PROJECT = {"--dir", "--http-max-streams", "--http-keepalive", "--changes", "--cdc"}
KNOWN = sorted(f for f in VALUE_FLAGS | SWITCHES if f.startswith("--"))  # what an unknown flag is likened to


def say(line: str) -> None:
    """One log line on stderr; a broken stderr is never fatal (server.md §8)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def version() -> str:
    try:
        from importlib.metadata import version as v

        return v("fenecdb-server")
    except Exception:
        return "0.0.0"


def help_text() -> str:
    lines = [f"fenec-server {version()}", USAGE, "", "flags (default in brackets):"]
    for flag, default, text in FLAGS:
        shown = f" [{default}]" if default else ""
        lines.append(f"  {flag:<28} {text}{shown}")
    return "\n".join(lines)


def parse(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in NEXT_TIER:
            raise BadFlag(f"{name}: a next-tier flag, not built yet")
        if name in NOT_IN_PROJECT:
            raise BadFlag(f"{name}: not in this project")
        if name in SWITCHES:
            if eq:
                raise BadFlag(f"{name} takes no value")
            opts["help" if name == "-h" else name.lstrip("-")] = True
            i += 1
            continue
        if name in VALUE_FLAGS:
            if eq:
                value = inline
            else:
                if i + 1 >= len(argv):
                    raise BadFlag(f"{name} is missing its value")
                value = argv[i + 1]
                i += 1
            opts["file" if name == "-f" else name.lstrip("-")] = value
            i += 1
            continue
        raise BadFlag(f"unknown flag: {arg}{did_you_mean(name, KNOWN, cutoff=0.6)}\n{USAGE}")
    return opts


def parse_sync(text: str) -> str | int:
    t = text.strip().lower()
    if t in ("off", "none"):
        return "off"
    if t in ("always", "on"):
        return "always"
    if t.isdigit() and int(t) > 0:
        return int(t)
    raise BadFlag("--sync expects off, always or <ms>")


def parse_addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise BadFlag(f"--http expects <host:port>, not {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


BUSY_POLL_DEFAULT_US = int(DEFAULTS["--busy-poll"])
BUSY_POLL_MAX_US = 10_000


def parse_busy_poll(text: str | None) -> int:
    """--busy-poll in microseconds. Not given: the default where the process may use two CPUs or
    more, else 0: on one CPU the spin would hold the CPU the client needs to send its request."""
    if text is not None:
        us = whole("--busy-poll", text)
        if us > BUSY_POLL_MAX_US:
            raise BadFlag(f"--busy-poll expects microseconds from 0 to {BUSY_POLL_MAX_US}")
        return us
    from .http.busy_poll import usable_cpus

    return BUSY_POLL_DEFAULT_US if usable_cpus(os.sched_getaffinity(0), cgroup_cpu_max()) >= 2 else 0


def cgroup_cpu_max() -> str | None:
    """The cgroup v2 `cpu.max` of this process's cgroup ("<quota> <period>" or "max <period>"),
    None where there is none to read."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((line[3:].strip() for line in f if line.startswith("0::")), None)
        for where in ([f"/sys/fs/cgroup{rel}/cpu.max"] if rel else []) + ["/sys/fs/cgroup/cpu.max"]:
            try:
                with open(where) as f:
                    return f.read().strip()
            except OSError:
                continue
    except OSError:
        pass
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ping(addr: str) -> int:
    import http.client

    host, port = parse_addr(addr)
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1" if host != "::" else "::1"
    try:
        conn = http.client.HTTPConnection(host, port, timeout=3)
        conn.request("GET", "/_health")
        status = conn.getresponse().status
        conn.close()
    except Exception as e:
        say(f"ping failed: {e}")
        return 1
    if status != http.HTTPStatus.OK:
        say(f"ping failed: /_health answered {status}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        status = _main(sys.argv[1:] if argv is None else argv)
    except BadFlag as e:
        say(e.message)
        status = 2
    if argv is None:
        sys.exit(status)
    return status


def _main(argv: list[str]) -> int:
    opts = parse(argv)
    if opts.get("help"):
        print(help_text())
        return 0
    if opts.get("ping"):
        return ping(given(opts, "--http"))
    from .http.auth import SetupError, configure, mint_token

    try:
        if "mint-token" in opts:
            print(mint_token(opts, os.environ))
            return 0
        access = configure(opts, os.environ)  # the start-up refusals of access.md §2.1
    except SetupError as e:
        raise BadFlag(e.message) from None

    path = opts.get("file")
    host, port = parse_addr(given(opts, "--http"))
    sync = parse_sync(given(opts, "--sync"))
    compact = given(opts, "--auto-compact").strip().lower()
    if compact != "off":
        try:
            ratio = float(compact)
        except ValueError:
            ratio = -1.0
        if not 0 < ratio < 1:
            raise BadFlag("--auto-compact expects a ratio between 0 and 1, or off")
    max_conn = whole("--max-connections", given(opts, "--max-connections"))
    idle = whole("--idle-timeout", given(opts, "--idle-timeout"))
    for flag in ("--header-timeout", "--body-timeout"):
        opts[flag[2:]] = seconds(flag, given(opts, flag), never=True)
    for flag in ("--max-statement-bytes", "--max-answer-rows", "--max-write-rows"):
        opts[flag[2:]] = whole(flag, given(opts, flag))
    ttl = whole("--idempotency-ttl", given(opts, "--idempotency-ttl"), minimum=1)
    slow = opts.get("slow-ms")
    slow_ms = float(whole("--slow-ms", slow)) if slow is not None else None
    busy_us = parse_busy_poll(opts.get("busy-poll"))
    token = access.server_token_text
    if not is_loopback(host) and access.open and not opts.get("insecure"):
        say(f"refusing to bind {host}:{port} with no token: set --http-token, or pass --insecure")
        return 1

    from .replication.options import checked

    replication = checked(opts, path, sync)
    from .database import Database
    from .replication.identity import Identity, refusal

    identity = Identity(path) if path else None
    if path and identity is not None and not opts.get("replica-of") and not opts.get("promote") \
            and not opts.get("etcd"):  # a cluster's member follows or leads as elected
        why = refusal(path, identity)
        if why is not None:
            say(f"could not open {why}")
            return 1
    try:
        db = Database(path, sync=sync, schedule_timer=False)  # fired from the event loop (start_background)
    except Exception as e:
        say(f"could not open {path}: {getattr(e, 'message', e)}")
        return 1
    if path:
        say(f"opened: {path}")
    if opts.get("http-read-only"):
        db.set_read_only(True)
    if opts.get("promote") and identity is not None and identity.role == "replica":
        history = identity.promote(db.seq)
        say(f"promoted: {path} takes writes from change {db.seq} on (history {history})")
    node = None
    if replication is not None and identity is not None:
        from .replication.node import from_flags

        node = from_flags(db, identity, replication)
    from . import gc_policy

    gc_policy.apply()  # the jobs just read are never walked by the cycle collector (gc_policy.py)
    return serve(db, opts, host=host, port=port, path=path, sync=sync, max_conn=max_conn, idle=idle,
                 ttl=ttl, slow_ms=slow_ms, token=token, compact=compact, access=access, busy_us=busy_us,
                 node=node)


def serve(db: Database, opts: dict[str, Any], *, host: str, port: int, path: str | None, sync: str | int,
          max_conn: int, idle: int, ttl: int, slow_ms: float | None, token: str | None, compact: str,
          access: Any = None, busy_us: int = 0, node: Any = None) -> int:
    import uvicorn

    from .http.app import App, Config
    from .http.busy_poll import BusyPoll
    from .http.protocol import Front

    access_log = None
    if opts.get("access-log"):
        from .http.access_log import open_log

        try:
            access_log = open_log(opts["access-log"])
        except OSError as e:
            say(f"could not open the access log {opts['access-log']}: {e.strerror or e}")
            db.close()
            return 1
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        say(f"could not bind {host}:{port}: {e.strerror or e}")
        db.close()
        return 1
    sock.setblocking(False)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]:{bound[1]}" if family == socket.AF_INET6 else f"{bound[0]}:{bound[1]}"

    server_box: list[Any] = []
    poll = BusyPoll(busy_us / 1e6) if busy_us else None
    app = App(db, Config(version=version(), token=token, cors=opts.get("http-cors"), idempotency_ttl_s=ttl,
                         slow_ms=slow_ms, sync_always=bool(path) and sync == "always",
                         auth=access.auth, auth_delay_ms=access.delay_ms,
                         max_statement_bytes=opts["max-statement-bytes"], closes_told=True,
                         max_answer_rows=opts["max-answer-rows"], max_write_rows=opts["max-write-rows"]),
              connections=lambda: len(server_box[0].server_state.connections) if server_box else 0, busy=poll,
              requests=lambda: server_box[0].server_state.total_requests if server_box else 0)
    if node is not None:
        from .http.replication import attach

        attach(app, node)

    asgi: Any = app
    if access_log is not None:
        from .http.access_log import AccessLog

        asgi = AccessLog(app, access_log)
    # the service answers /query and /batch itself (protocol.py), unless the access log must see every request
    front = Front(app if access_log is None else None, asgi, max_connections=max_conn, busy=poll,
                  evict=access is not None and not access.open,
                  header_timeout=opts["header-timeout"], body_timeout=opts["body-timeout"])
    if node is not None and node.primary:  # new connections drop Fenec-Primary once promoted
        node.promoted.append(lambda: setattr(front, "answer_lines", app.answer_lines()))

    # uvicorn serves the socket bound above (lifespan, signals, drain); `http` makes each connection's protocol
    config = uvicorn.Config(asgi, http=front.protocol, loop="uvloop", lifespan="on", log_config=None,  # type: ignore[arg-type]
                            access_log=False, server_header=False, date_header=True, proxy_headers=False,
                            timeout_keep_alive=idle if idle > 0 else 10 ** 9,
                            timeout_graceful_shutdown=2)
    ver = version()
    sync_label = {"always": "every write", "off": "on shutdown"}.get(sync, f"{sync} ms")  # type: ignore[arg-type]
    busy_label = f"{busy_us} us" if busy_us else "off"
    engine_label = "compiled" if compiled.running() else "python"  # setup.py, compiled.py
    auth = "no auth" if (access.open if access is not None else not token) else "token"
    if opts.get("http-read-only"):
        auth += ", read only"
    if node is not None:
        if node.cluster is not None:
            auth += f", member of cluster {node.cluster.name} as {node.cluster.advertise}"
        else:
            auth += f", replica of {node.primary}" if node.primary else ", primary of replicas"

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            self._fenec_background = start_background(
                db, compact, path, requests=app.requests,
                sweeping=(lambda: node.role == "primary") if node is not None else None)
            if node is not None:
                node.start()
                if node.cluster is not None:
                    node.cluster.start()
            say(f"fenec-server {ver}: {path or 'in memory'}  [sync={sync_label}, busy-poll={busy_label}, "
                f"engine={engine_label}]")
            old = compiled.stale()
            if old:
                say(f"warning: compiled modules older than their sources run the old code: {', '.join(old)} "
                    "(pip install -e server compiles them again)")
            say(f"fenec-http {ver} listening on: http://{shown}  [{auth}]")

        def capture_signals(self) -> Any:
            import contextlib

            @contextlib.contextmanager
            def handlers() -> Any:
                # SIGHUP too (uvicorn handles INT and TERM only), and no re-raise at the end:
                # a signal is a clean shutdown, exit 0.
                loop = asyncio.get_running_loop()
                originals = {s: signal.signal(s, lambda n, f: self.stop(loop)) for s in
                             (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
                try:
                    yield
                finally:
                    for s, h in originals.items():
                        signal.signal(s, h)

            return handlers()

        def stop(self, loop: asyncio.AbstractEventLoop) -> None:
            if self.should_exit:
                self.force_exit = True
                return
            self.should_exit = True
            if node is not None:
                node.closing = True  # the replication streams end
                if node.cluster is not None:
                    node.cluster.leading_until = 0.0  # nothing acknowledged from now on
            loop.call_soon_threadsafe(app.shutdown)

    server = Server(config)
    server_box.append(server)
    try:
        import uvloop

        runner: Callable[[Any], Any] = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    runner(server.serve(sockets=[sock]))
    if node is not None:
        if node.cluster is not None:
            node.cluster.stop()  # the lease revoked: the others elect at once
        node.stop()  # the follower's last record applied whole, before the file closes
    return shut_down(db)


def shut_down(db: Database) -> int:
    """server.md §6 steps 3-4: `db.close()` takes the write lock for good and fsyncs if anything
    is dirty; its answer picks the line. Exit 1 when that last fsync fails."""
    try:
        dirty = db.close()
    except Exception as e:
        say(f"sync error: {getattr(e, 'message', e)}")
        return 1
    if db.failed:
        say("shutting down: the disk refused a write earlier (see the sync error above); "
            "writes since the last good sync may not be on disk")
    elif dirty:
        say("shutting down: writes were pushed to disk")
    else:
        say("shutting down: no pending writes")
    return 0


SWEEP_EVERY_S = 15
COMPACT_CHECK_S = 5.0
COMPACT_MIN_DEAD = 64 * 1024 * 1024


def compaction_due(db: Database, ratio: float, min_dead: int = COMPACT_MIN_DEAD) -> bool:
    """server.md §1.2: the dead share of the file is at least `ratio` and the dead part at least
    `min_dead` bytes (the dead bytes are the estimate of `storage/footprint.py`). The storage
    counts alone: `db.stats()` would also count every job's state, a pass over all the rows (a
    million jobs: most of a second of the server's CPU, every COMPACT_CHECK_S)."""
    storage = db.storage_stats()
    size = storage.get("file_bytes") or 0
    dead = storage.get("reclaimable_bytes") or 0
    return bool(size) and dead >= min_dead and dead / size >= ratio


def compact_paced(db: Database, requests: Callable[[], int] | None) -> dict:
    """An automatic compaction, its encoder resting while the server answers (`database.Pace`)."""
    from .database import Pace

    return db.compact(auto=True, pace=Pace(requests) if requests is not None else None)


async def fire_schedules(db: Database) -> None:
    """The schedules' timer on the event loop (engine/schedules.py): it sleeps until the earliest
    due time, woken at once when a schedule is made or changed (and at least every RECHECK_S),
    and fires what is due in a worker thread, since a fire is a write."""
    from .engine.schedules import sleep_s

    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def changed() -> None:  # called by a write, from any thread
        loop.call_soon_threadsafe(wake.set)
    db.schedules.changed = changed
    while True:
        try:
            await asyncio.wait_for(wake.wait(), sleep_s(db))
        except TimeoutError:
            pass
        wake.clear()
        nxt = db.schedules.next_due()
        if nxt is None or nxt > db.now():
            continue
        try:
            await loop.run_in_executor(None, db.fire_due)
        except Exception as e:
            say(f"schedules: {getattr(e, 'message', e)}")
            await asyncio.sleep(1)


def start_background(db: Database, compact: str, path: str | None, *, every_s: float = COMPACT_CHECK_S,
                     min_dead: int = COMPACT_MIN_DEAD, requests: Callable[[], int] | None = None,
                     sweeping: Callable[[], bool] | None = None) -> Any:
    """The TTL sweeper (expired `@ttl` rows and Idempotency-Keys, physically deleted by
    `db.sweep()`, which itself keeps them a minute past their time), and auto-compaction
    (server.md §1.2): every `every_s`, compact once `compaction_due`. Both run in a worker
    thread: they take the write lock. Tests lower `every_s` and `min_dead`. `sweeping()` false:
    no sweep now (a replica's rows and keys go as its primary's sweep's records say)."""
    loop = asyncio.get_running_loop()

    async def sweep() -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            if sweeping is not None and not sweeping():
                continue
            try:
                await loop.run_in_executor(None, db.sweep)
            except Exception as e:
                say(f"ttl sweep: {getattr(e, 'message', e)}")

    tasks = [loop.create_task(sweep()), loop.create_task(fire_schedules(db))]
    if compact == "off" or not path:
        return tasks
    ratio = float(compact)

    async def check() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                if not await loop.run_in_executor(None, compaction_due, db, ratio, min_dead):
                    continue
                done = await loop.run_in_executor(None, compact_paced, db, requests)
                say(f"compacted: {done['bytes_before']:,} -> {done['bytes_after']:,} bytes, "
                    f"log lock held {done['lock_us'] / 1000:.1f} ms")
            except Exception as e:
                say(f"auto-compaction: {getattr(e, 'message', e)}")

    tasks.append(loop.create_task(check()))
    return tasks


if __name__ == "__main__":
    main()
