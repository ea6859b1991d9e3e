"""The wake timeline's reading of `perf script`, on lines written here: no perf, no server."""

from __future__ import annotations

from .timeline import events, layout, wakes


def line(t: float, kind: str, call: str, args: str = "") -> str:
    return f"    fenec-server 28983 [000] {t:.6f}: syscalls:sys_{kind}_{call}: {args}"


def one_wake(t0: float, worker: int = 16, put: int = 17, file: int = 3) -> list[str]:
    """The worker's waiting claim read, the loop asleep 10 ms, then the put and its wake."""
    return [line(t0, "enter", "read", f"fd: 0x{worker:08x}, buf: 0x1, count: 0x3e800"),
            line(t0 + 0.0001, "enter", "epoll_pwait", "epfd: 0x5"),
            line(t0 + 0.0101, "exit", "epoll_pwait", "0x1"),
            line(t0 + 0.010113, "enter", "read", f"fd: 0x{put:08x}, buf: 0x1, count: 0x3e800"),
            line(t0 + 0.010326, "enter", "pwritev2", f"fd: 0x{file:08x}, vec: 0x1"),
            line(t0 + 0.010485, "enter", "epoll_pwait", "epfd: 0x5"),
            line(t0 + 0.010487, "exit", "epoll_pwait", "0x0"),
            line(t0 + 0.010588, "enter", "pwritev2", f"fd: 0x{file:08x}, vec: 0x1"),
            line(t0 + 0.010655, "enter", "write", f"fd: 0x{worker:08x}, buf: 0x1, count: 0xb4"),
            line(t0 + 0.010956, "enter", "write", f"fd: 0x{put:08x}, buf: 0x1, count: 0xb2")]


def test_a_wake_is_laid_out_from_the_poll_that_slept() -> None:
    text = "\n".join(one_wake(1.0) + one_wake(2.0) + ["garbage that is not an event"])
    seqs = wakes(events(text))
    assert len(seqs) == 2
    labels = [label for label, _ in seqs[0]]
    assert labels == ["read the put", "append to the file", "poll (a loop turn)", "append to the file",
                      "answer the worker", "answer the put"]
    n, steps = layout(seqs)
    assert n == 2
    assert [round(us) for _, us in steps] == [13, 226, 385, 488, 555, 856]


def test_a_poll_that_did_not_sleep_starts_no_wake_and_a_file_write_is_an_append() -> None:
    busy = [line(1.0, "enter", "epoll_pwait", "epfd: 0x5"), line(1.0001, "exit", "epoll_pwait", "0x1"),
            line(1.0002, "enter", "read", "fd: 0x00000011, buf: 0x1")]
    assert wakes(events("\n".join(busy))) == []
    # Redis appends its AOF with write(2): to neither connection, so an append
    text = "\n".join(one_wake(1.0)).replace("pwritev2", "write")
    assert [label for label, _ in wakes(events(text))[0]][:2] == ["read the put", "append to the file"]
    assert layout([]) == (0, [])
