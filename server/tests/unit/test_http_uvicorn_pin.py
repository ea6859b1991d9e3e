"""uvicorn runs the server's lifecycle and nothing of its wire: the transport (http/protocol.py,
connection.py) is an `asyncio.Protocol` of the server's own that uvicorn makes through its public
`Config(http=...)`, serving the socket cli.py bound, with the lifespan, the signals and the drain
at shutdown. What the transport takes from it is what that factory is handed: the config (its
`timeout_keep_alive`) and the server's state (the open connections, the running tasks, the date
header, the count of requests answered); and at shutdown uvicorn calls each connection's
`shutdown()` and waits for the connections to close. The uvicorn it runs on is the exact version
pyproject.toml pins, and an upgrade that moves any of this fails here first."""

from __future__ import annotations

import asyncio
import re
import socket
from importlib.metadata import version
from pathlib import Path
from typing import Any

import uvicorn

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
STATE = ("connections", "tasks", "default_headers", "total_requests")


def pinned(name: str) -> str:
    """The version pyproject.toml pins `name` to, exactly, for the install and for the build."""
    text = PYPROJECT.read_text(encoding="utf-8")
    pins = set(re.findall(rf'"{name}(?:\[\w+\])?==([\w.]+)"', text))
    assert len(pins) == 1, f"pyproject.toml must pin {name} exactly, once for all its mentions: {pins}"
    assert not re.search(rf'"{name}(?:\[\w+\])?\s*[<>~!]', text), f"{name} has a range in pyproject.toml"
    return pins.pop()


def test_the_uvicorn_installed_is_the_one_pinned():
    assert version("uvicorn") == pinned("uvicorn")


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return


class _Probe(asyncio.Protocol):
    """A protocol made as cli.py makes the server's, noting what uvicorn hands it and calls."""

    made: list[dict[str, Any]] = []
    shut: list[_Probe] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.state = kwargs["server_state"]
        _Probe.made.append(kwargs)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.state.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)

    def shutdown(self) -> None:
        _Probe.shut.append(self)
        self.transport.close()


def test_uvicorn_makes_our_protocol_hands_it_its_state_and_shuts_it_down():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    config = uvicorn.Config(_app, http=_Probe, lifespan="on", log_config=None, timeout_keep_alive=7,
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)

    async def run() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        while not _Probe.made or not server.server_state.connections:
            await asyncio.sleep(0.01)
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
        writer.close()

    asyncio.run(run())
    kwargs = _Probe.made[0]
    assert set(kwargs) >= {"config", "server_state", "app_state", "_loop"}
    assert kwargs["config"].timeout_keep_alive == 7
    state = kwargs["server_state"]
    missing = [name for name in STATE if not hasattr(state, name)]
    assert not missing, f"uvicorn {version('uvicorn')} moved what the transport reads of its state: {missing}"
    assert state.default_headers and state.default_headers[0][0] == b"date"  # its clock ticks the date
    assert len(_Probe.shut) == 1 and not state.connections  # told to shut down, and waited for
