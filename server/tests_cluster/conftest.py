"""The failover part says first how its network faults are made (network.py), whatever pytest's
verbosity: `network faults: namespaces`, or `network faults: proxy (no namespaces: <why>)`."""

from __future__ import annotations

import pytest
from network import describe


def pytest_sessionstart(session: pytest.Session) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(describe())
