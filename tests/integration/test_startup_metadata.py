"""A client that reaches a broker the moment its listener opens gets a usable Metadata answer.

The listener opens before the controller's first UpdateMetadata reaches the broker; an answer
from the empty cache (no brokers, no controller) left librdkafka's admin client waiting out its
whole timeout for a controller (test_retention's CreateTopics, 1 run in 3). Metadata now waits
for the first UpdateMetadata (broker/apis/metadata.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess
from tests.support.wire import connect

pytestmark = pytest.mark.integration


async def test_metadata_from_the_first_moment_names_the_broker_and_controller(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(0, start=False)
    b.start(wait=False)
    deadline = time.monotonic() + 30
    while True:  # the first connection the listener accepts
        try:
            conn = await connect(b)
            break
        except ConnectionError:
            assert time.monotonic() < deadline, b.log()
            await asyncio.sleep(0.005)
    async with conn:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
    assert [br["node_id"] for br in md["brokers"]] == [0]
    assert md["controller_id"] == 0
