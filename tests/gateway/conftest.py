"""The gateway a test module started is stopped when the module ends: no server thread of it runs (and frees
objects) while later tests look at the process."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def _stop_gateway():
    yield
    from astuner.gateway import server

    if server._GATEWAY is not None:
        server._GATEWAY.stop()
        server._GATEWAY = None
