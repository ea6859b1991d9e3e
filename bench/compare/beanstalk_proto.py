"""beanstalkd's text protocol, the few commands a queue needs: use/watch a tube, put, reserve-with-timeout,
delete, and pipelining (send many commands, then read their answers in order)."""

from __future__ import annotations

import socket


class BeanstalkError(Exception):
    pass


class Beanstalk:
    def __init__(self, host: str, port: int, tube: str = "default") -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.out: list[bytes] = []
        if tube != "default":
            self.send(f"use {tube}".encode())
            self.send(f"watch {tube}".encode())
            self.send(b"ignore default")
            for _ in range(3):
                self.line()

    # ---- the wire

    def send(self, cmd: bytes, body: bytes | None = None) -> None:
        """Queue one command; `flush` writes what is queued."""
        self.out.append(cmd + b"\r\n")
        if body is not None:
            self.out.append(body + b"\r\n")

    def flush(self) -> None:
        if self.out:
            self.sock.sendall(b"".join(self.out))
            self.out = []

    def line(self) -> bytes:
        self.flush()
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                head, self.buf = self.buf[:i], self.buf[i + 2:]
                return head
            self._more()

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise BeanstalkError("connection closed")
        self.buf += chunk

    def _body(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._more()
        body, self.buf = self.buf[:n], self.buf[n + 2:]
        return body

    # ---- commands

    def put_later(self, body: bytes, pri: int = 1024, delay: int = 0, ttr: int = 30) -> None:
        self.send(f"put {pri} {delay} {ttr} {len(body)}".encode(), body)

    def put_answer(self) -> int:
        head = self.line()
        if not head.startswith(b"INSERTED "):
            raise BeanstalkError(head.decode())
        return int(head.split()[1])

    def put(self, body: bytes, pri: int = 1024, delay: int = 0, ttr: int = 30) -> int:
        self.put_later(body, pri, delay, ttr)
        return self.put_answer()

    def reserve_later(self, timeout: int) -> None:
        self.send(f"reserve-with-timeout {timeout}".encode())

    def reserve_answer(self) -> tuple[int, bytes] | None:
        head = self.line()
        if head.startswith(b"RESERVED "):
            _, jid, n = head.split()
            return int(jid), self._body(int(n))
        if head in (b"TIMED_OUT", b"DEADLINE_SOON"):
            return None
        raise BeanstalkError(head.decode())

    def reserve(self, timeout: int) -> tuple[int, bytes] | None:
        self.reserve_later(timeout)
        return self.reserve_answer()

    def delete_later(self, jid: int) -> None:
        self.send(f"delete {jid}".encode())

    def delete_answer(self) -> None:
        head = self.line()
        if head != b"DELETED":
            raise BeanstalkError(head.decode())

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
