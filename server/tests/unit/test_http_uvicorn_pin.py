"""The transport (http/protocol.py) subclasses uvicorn's httptools protocol and uses its internals:
the uvicorn it runs on is the exact version pyproject.toml pins, and every internal it touches is
where protocol.py expects it. An upgrade fails here first: move the pin only with this test passing."""

from __future__ import annotations

import asyncio
import re
from importlib.metadata import version
from pathlib import Path

from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# what protocol.py reads or sets on uvicorn's objects (the connection, its cycle, its flow control,
# the server's state), and the methods it overrides or calls
CONNECTION = ("cycle", "pipeline", "flow", "server_state", "timeout_keep_alive_task", "timeout_keep_alive",
              "parser", "headers", "scope", "expect_100_continue", "connections", "client", "server", "scheme",
              "root_path", "loop", "transport")
METHODS = ("connection_made", "connection_lost", "data_received", "eof_received", "on_message_begin", "on_url",
           "on_header", "on_headers_complete", "on_body", "on_message_complete", "on_response_complete",
           "pause_writing", "resume_writing", "send_400_response", "timeout_keep_alive_handler",
           "_unset_keepalive_if_required")
CYCLE = ("response_complete", "keep_alive", "body", "more_body", "message_event", "disconnected")
FLOW = ("read_paused", "write_paused", "resume_reading")
STATE = ("default_headers", "total_requests", "connections")


def pinned(name: str) -> str:
    """The version pyproject.toml pins `name` to, exactly, for the install and for the build."""
    text = PYPROJECT.read_text(encoding="utf-8")
    pins = set(re.findall(rf'"{name}(?:\[\w+\])?==([\w.]+)"', text))
    assert len(pins) == 1, f"pyproject.toml must pin {name} exactly, once for all its mentions: {pins}"
    assert not re.search(rf'"{name}(?:\[\w+\])?\s*[<>~!]', text), f"{name} has a range in pyproject.toml"
    return pins.pop()


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover - never called
    pass


def test_the_uvicorn_installed_is_the_one_pinned():
    assert version("uvicorn") == pinned("uvicorn")


def test_the_internals_protocol_py_uses_are_there():
    loop = asyncio.new_event_loop()
    try:
        conn = HttpToolsProtocol(Config(app=_app), ServerState(), {}, _loop=loop)
        missing = [name for name in CONNECTION if not hasattr(conn, name)]
        missing += [name for name in METHODS if not callable(getattr(HttpToolsProtocol, name, None))]
        flow = FlowControl(_Transport())
        missing += [f"flow.{name}" for name in FLOW if not hasattr(flow, name)]
        state = ServerState()
        missing += [f"server_state.{name}" for name in STATE if not hasattr(state, name)]
        cycle = RequestResponseCycle(scope={}, transport=_Transport(), flow=flow, logger=conn.logger,  # type: ignore[arg-type]
                                     access_logger=conn.access_logger, access_log=False,
                                     default_headers=[], message_event=asyncio.Event(), expect_100_continue=False,
                                     keep_alive=True, on_response=lambda: None)
        missing += [f"cycle.{name}" for name in CYCLE if not hasattr(cycle, name)]
    finally:
        loop.close()
    assert not missing, f"uvicorn {version('uvicorn')} moved what protocol.py uses: {missing}"


class _Transport:
    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
