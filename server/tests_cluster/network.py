"""The network the failover tests run the cluster on, and how they cut a member off from etcd or
from the other members while the test's clients still reach it.

Two ways behind one interface (`Network`, a `Place` per member), chosen once per run (`choice`):

**namespaces** (root, `ip`): etcd and two bridges live in a hub namespace; each member runs in a
namespace of its own (`ip netns exec`) with three veth pairs:

    e  to the hub's etcd bridge      10.R.1.0/24   (etcd at 10.R.1.1)
    p  to the hub's peers' bridge    10.R.3.0/24
    c  to the root namespace         10.R.2.4i/30  (the test's clients)

A member binds and advertises one address of its own, 10.R.0.(10+i) on its loopback: the root
namespace routes it through `c`, the other members through `p`, so the URL a refusal names is the
one a client can follow. Members have no default route, so a path that is cut is not replaced by
another (whatever the root namespace forwards). A cut is the hub's end of a link set down
(`Place.cut`; `heal` sets it up): both sides then drop what crosses it, in silence (no reset, no
refusal), as in a real partition (`tc netem` would do as well, but is not in every kernel); the member's own end stays up, keeping its routes. The root
namespace reaches etcd through a fourth pair (10.R.4.0/30). R (the second byte of the addresses) is
free in the root namespace, chosen under a lock; the names of the namespaces and of the root's links
start with `fn<pid>` (the id of the process that made them), so concurrent runs never collide, and
what a crashed run left (names whose process is gone) is removed first, never a live run's. `close`
kills what still runs in this run's namespaces and deletes them, and with them every link.

**proxy** (not root, no `ip`, or FENEC_NETWORK_FAULTS=proxy): everything on 127.0.0.1, a fault proxy
(conformance/fault_layer.py) in front of etcd for each member and in front of each member for the
others; a cut freezes a proxy (connections accepted and never answered). The clients reach each
member directly, as above.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance"))
from fault_layer import Proxy  # noqa: E402

ENV = "FENEC_NETWORK_FAULTS"  # "proxy" forces the fallback
PREFIX = f"fn{os.getpid()}"
MEMBER_PORT = 8080  # every member has an address of its own: the same port on each
ETCD_PORT = 2379


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def root_link(ns: str, inside: str, here: str, there: str) -> None:
    """A veth pair from the root namespace (named `ns`, address `here`) into namespace `ns` (named
    `inside`, address `there`), on a /30 of their own, both ends up."""
    ip("link", "add", ns, "type", "veth", "peer", "name", inside, "netns", ns)
    ip("addr", "add", f"{here}/30", "dev", ns)
    ip("link", "set", ns, "up")
    ip("-n", ns, "addr", "add", f"{there}/30", "dev", inside)
    ip("-n", ns, "link", "set", inside, "up")


@functools.cache
def choice() -> tuple[str, str]:
    """("namespaces", "") or ("proxy", why not namespaces); probed once per run."""
    if os.environ.get(ENV) == "proxy":
        return "proxy", f"{ENV}=proxy"
    if os.geteuid() != 0:
        return "proxy", "not root"
    if shutil.which("ip") is None:
        return "proxy", "no 'ip' on PATH"
    probe = f"{PREFIX}x"
    try:
        ip("netns", "del", probe, check=False)  # a crashed run's
        ip("netns", "add", probe)
        ip("-n", probe, "link", "add", "t0", "type", "veth", "peer", "name", "t1")
        ip("-n", probe, "link", "add", "name", "hub", "type", "bridge")
    except OSError as e:
        return "proxy", str(e)
    finally:
        ip("netns", "del", probe, check=False)
    return "namespaces", ""


def describe() -> str:
    kind, why = choice()
    return f"network faults: {kind}" + (f" (no namespaces: {why})" if why else "")


NAME = re.compile(r"fn(\d+)[a-z]")  # `fn`, the owning process's id, one letter


def owner(name: str) -> int | None:
    """The id of the process that made a namespace or root link of ours: `fn<pid>` and one letter
    (a member's name, `n` the hub, `x` the probe); None for a name not of this kind."""
    m = NAME.fullmatch(name)
    return int(m.group(1)) if m else None


def ours(name: str) -> bool:
    """A namespace or root link of this run."""
    return owner(name) == os.getpid()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # there, another user's
        return True
    return True


def left_over(name: str) -> bool:
    """A namespace or root link of this run, or of a run whose process is gone (a crash, a SIGKILL):
    never one of a run still going."""
    pid = owner(name)
    return pid is not None and (pid == os.getpid() or not alive(pid))


def remove(which: Callable[[str], bool] = left_over) -> None:
    """The namespaces and root links `which` picks, with the processes still running inside them."""
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        if which(name):
            kill_inside(name)
            ip("netns", "del", name, check=False)
    for name in re.findall(r"^\d+: ([^:@\s]+)", ip("-o", "link", "show", check=False), re.M):
        if which(name):
            ip("link", "del", name, check=False)


def kill_inside(ns: str) -> None:
    for pid in ip("netns", "pids", ns, check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


class Place:
    """Where a member runs: the address it binds and advertises, the command prefix that runs it
    there, its etcd URL; `cut` and `heal` its paths to etcd and to the other members."""

    def __init__(self, host: str, port: int, etcd: str, advertise: str, prefix: tuple[str, ...],
                 flags: tuple[str, ...]) -> None:
        self.host, self.port, self.etcd, self.advertise, self.prefix, self.flags = host, port, etcd, advertise, prefix, flags

    def cut(self, etcd: bool, peers: bool) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Network:
    """etcd's place (`etcd_host`, `etcd_port`, `etcd_peer`, `etcd_prefix`) and the members'."""

    kind = ""
    etcd_host = "127.0.0.1"
    etcd_port = 0
    etcd_peer = ""
    etcd_prefix: tuple[str, ...] = ()

    def place(self, name: str) -> Place:
        raise NotImplementedError

    def close(self) -> None:
        pass


def network(names: list[str]) -> Network:
    return Namespaces(names) if choice()[0] == "namespaces" else Proxies()


class ProxyPlace(Place):
    def __init__(self, etcd_port: int) -> None:
        port = free_port()
        self.etcd_proxy = Proxy()
        self.etcd_proxy.start(etcd_port)
        self.proxy = Proxy()  # the URL the others reach this one at
        self.proxy.start(port)
        super().__init__("127.0.0.1", port, self.etcd_proxy.url, self.proxy.url, (), ())

    def cut(self, etcd: bool, peers: bool) -> None:
        if etcd:
            self.etcd_proxy.freeze()
        if peers:
            self.proxy.freeze()

    def heal(self) -> None:
        self.etcd_proxy.pass_()
        self.proxy.pass_()

    def close(self) -> None:
        self.proxy.close()
        self.etcd_proxy.close()


class Proxies(Network):
    kind = "proxy"

    def __init__(self) -> None:
        self.etcd_port = free_port()
        self.etcd_peer = f"http://127.0.0.1:{free_port()}"

    def place(self, name: str) -> Place:
        return ProxyPlace(self.etcd_port)


class NamespacePlace(Place):
    def __init__(self, hub: str, name: str, host: str, etcd: str) -> None:
        self.hub, self.name = hub, name
        # --insecure: a server refuses to bind beyond loopback while the clients' access is open (no
        # token), and the tests' clients send none
        super().__init__(host, MEMBER_PORT, etcd, f"http://{host}:{MEMBER_PORT}",
                         ("ip", "netns", "exec", f"{PREFIX}{name}"), ("--insecure",))

    def cut(self, etcd: bool, peers: bool) -> None:
        for link, on in ((f"e{self.name}", etcd), (f"p{self.name}", peers)):
            if on:
                ip("-n", self.hub, "link", "set", link, "down")

    def heal(self) -> None:
        for link in (f"e{self.name}", f"p{self.name}"):
            ip("-n", self.hub, "link", "set", link, "up")


class Namespaces(Network):
    kind = "namespaces"
    LOCK = Path(tempfile.gettempdir()) / "fenec-netns.lock"

    def __init__(self, names: list[str]) -> None:
        self.hub = f"{PREFIX}n"
        remove(left_over)
        try:
            with open(self.LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # R is free until this run's root addresses are set
                self.net = f"10.{free_second_byte()}"
                self._build(names)
        except BaseException:
            self.close()
            raise
        self.etcd_host = f"{self.net}.1.1"
        self.etcd_port = ETCD_PORT
        self.etcd_peer = "http://127.0.0.1:2380"
        self.etcd_prefix = ("ip", "netns", "exec", self.hub)

    def _build(self, names: list[str]) -> None:
        n, hub = self.net, self.hub
        ip("netns", "add", hub)
        ip("-n", hub, "link", "set", "lo", "up")
        for bridge, address in (("etcd", f"{n}.1.1/24"), ("peers", None)):
            ip("-n", hub, "link", "add", "name", bridge, "type", "bridge")
            if address:
                ip("-n", hub, "addr", "add", address, "dev", bridge)
            ip("-n", hub, "link", "set", bridge, "up")
        # the root namespace's way to etcd
        root_link(hub, "r", f"{n}.4.1", f"{n}.4.2")
        ip("route", "add", f"{n}.1.1/32", "via", f"{n}.4.2")
        for i, name in enumerate(names):
            ns, own = f"{PREFIX}{name}", f"{n}.0.{10 + i}"
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", f"{own}/32", "dev", "lo")
            root_link(ns, "c", f"{n}.2.{4 * i + 1}", f"{n}.2.{4 * i + 2}")
            ip("route", "add", f"{own}/32", "via", f"{n}.2.{4 * i + 2}")
            for link, bridge, subnet in (("e", "etcd", 1), ("p", "peers", 3)):
                ip("-n", hub, "link", "add", f"{link}{name}", "type", "veth", "peer", "name", link, "netns", ns)
                ip("-n", hub, "link", "set", f"{link}{name}", "master", bridge, "up")
                ip("-n", ns, "addr", "add", f"{n}.{subnet}.{10 + i}/24", "dev", link)
                ip("-n", ns, "link", "set", link, "up")
            for j in range(len(names)):
                if j != i:
                    ip("-n", ns, "route", "add", f"{n}.0.{10 + j}/32", "via", f"{n}.3.{10 + j}")
        self.names = names

    def place(self, name: str) -> Place:
        own = f"{self.net}.0.{10 + self.names.index(name)}"
        return NamespacePlace(self.hub, name, own, f"http://{self.etcd_host}:{self.etcd_port}")

    def close(self) -> None:
        remove(ours)


def free_second_byte() -> int:
    """A second byte R for 10.R.0.0/16 that no address or route of the root namespace uses."""
    used = set(re.findall(r"\b10\.(\d+)\.", ip("-o", "-4", "addr", "show") + ip("-4", "route", "show", "table", "all")))
    start = os.getpid() % 150
    for k in range(150):
        r = 100 + (start + k) % 150
        if str(r) not in used:
            return r
    raise OSError("no free 10.R.0.0/16 in 10.100-249")
