"""network.py, without etcd or a server: a cut member is silent to etcd and to the other members
and still answers the test's clients; `heal` brings the paths back; what crashed runs left (their
process gone) is removed at start-up, a live run's never, and `close` leaves nothing behind; the
fallback is chosen, and said, when namespaces are refused."""

from __future__ import annotations

import subprocess
import sys

import network
import pytest

NAMES = ["a", "b", "c"]
LISTEN = "import socket,sys; s=socket.create_server((sys.argv[1], int(sys.argv[2]))); print(1, flush=True)\n" \
         "while True: s.accept()[0].close()"
CONNECT = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)"

needs_namespaces = pytest.mark.skipif(network.choice()[0] != "namespaces",
                                      reason=f"no namespaces: {network.choice()[1]}")


def listen(prefix: tuple[str, ...], host: str, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([*prefix, sys.executable, "-c", LISTEN, host, str(port)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "1"
    return proc


def reaches(prefix: tuple[str, ...], host: str, port: int) -> bool:
    return subprocess.run([*prefix, sys.executable, "-c", CONNECT, host, str(port)],
                          capture_output=True).returncode == 0


def ours() -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [n for n in names if network.ours(n)] + [w for w in links.split() if network.ours(w.rstrip(":").split("@")[0])]


@needs_namespaces
def test_a_cut_member_is_silent_to_etcd_and_its_peers_and_still_answers_the_clients() -> None:
    subprocess.run(["ip", "netns", "add", f"{network.PREFIX}a"], check=True)  # a crashed run's leftover
    net = network.Namespaces(NAMES)
    procs: list[subprocess.Popen[str]] = []
    try:
        a, b = net.place("a"), net.place("b")
        procs.append(listen(a.prefix, a.host, a.port))
        procs.append(listen(net.etcd_prefix, net.etcd_host, net.etcd_port))
        assert a.advertise == f"http://{a.host}:{a.port}"  # what the clients are sent to, and reach

        def paths() -> tuple[bool, bool, bool]:
            return (reaches((), a.host, a.port), reaches(b.prefix, a.host, a.port),
                    reaches(a.prefix, net.etcd_host, net.etcd_port))

        assert paths() == (True, True, True)
        a.cut(etcd=True, peers=False)
        assert paths() == (True, True, False)
        assert reaches(b.prefix, net.etcd_host, net.etcd_port)  # the others keep etcd
        a.heal()
        a.cut(etcd=True, peers=True)
        assert paths() == (True, False, False)  # the clients still reach it
        a.heal()
        assert paths() == (True, True, True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        net.close()
    assert ours() == []
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    assert f"{net.net}." not in routes


def gone_pid() -> int:
    """The id of a process that has exited (a crashed run's)."""
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_a_name_is_left_over_when_its_process_is_gone_and_never_a_live_runs() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            assert network.left_over(f"fn{gone_pid()}a") and network.left_over(f"fn{gone_pid()}n")
            assert network.left_over(f"{network.PREFIX}b")  # this run's own, from before
            assert not network.left_over(f"fn{live.pid}a")  # a run still going
            assert not network.left_over("eth0") and not network.left_over(f"fn{gone_pid()}") \
                and not network.left_over(f"xfn{gone_pid()}a")
        finally:
            live.kill()


@needs_namespaces
def test_the_leftovers_of_every_crashed_run_are_removed_and_a_live_runs_kept() -> None:
    dead, dead_too = gone_pid(), gone_pid()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        made = [f"fn{dead}a", f"fn{dead_too}n", f"fn{live.pid}a"]
        try:
            for ns in made:
                subprocess.run(["ip", "netns", "add", ns], check=True)
            # a root link of a crashed run and one of a live run, each pair's other end in the run's namespace
            for pid in (dead, live.pid):
                subprocess.run(["ip", "link", "add", f"fn{pid}b", "type", "veth", "peer", "name", "c", "netns",
                                f"fn{pid}a"], check=True)
            network.remove()
            names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
            assert f"fn{dead}a" not in names and f"fn{dead_too}n" not in names and f"fn{dead}b" not in links
            assert f"fn{live.pid}a" in names and f"fn{live.pid}b" in links
        finally:
            live.kill()
            subprocess.run(["ip", "link", "del", f"fn{live.pid}b"], capture_output=True)
            for ns in made:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_the_proxies_are_chosen_and_said_when_namespaces_are_not_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(network.ENV, "proxy")
    assert network.choice.__wrapped__() == ("proxy", f"{network.ENV}=proxy")
    monkeypatch.delenv(network.ENV)
    monkeypatch.setattr(network.os, "geteuid", lambda: 1000)
    assert network.choice.__wrapped__() == ("proxy", "not root")
    monkeypatch.setattr(network, "choice", lambda: ("proxy", "not root"))
    assert network.describe() == "network faults: proxy (no namespaces: not root)"
