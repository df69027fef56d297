"""KafkaJS's producer (npm kafkajs 2.2.4). Its consumer needs groups, so the bytes are read back with kafka-python."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.messages import N_MESSAGES, expected_messages, read_back_with_kafka_python
from tests.support.topics import create_topic

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def kafkajs(kafkajs_dir: Path) -> Path:
    return kafkajs_dir / "produce.js"


@pytest.mark.parametrize("acks", [1, -1])
@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_produce(client_broker, kafkajs: Path, acks: int, codec: str) -> None:  # noqa: ANN001
    topic = f"kjs-{codec}-{acks}"
    asyncio.run(create_topic(client_broker, topic))
    msgs = expected_messages(topic)
    payload = json.dumps([[k.decode(), v.decode()] for k, v in msgs])
    run = subprocess.run(["node", str(kafkajs), client_broker.bootstrap, topic, str(acks), codec],
                         input=payload.encode(), capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    acked = json.loads(run.stdout)
    assert [code for _, code in acked] == [0] * len(acked)
    assert [base for base, _ in acked] == list(range(0, N_MESSAGES, 500))

    got, _ = read_back_with_kafka_python(client_broker.bootstrap, topic)
    assert [o for o, _, _ in got] == list(range(N_MESSAGES))
    assert [(k, v) for _, k, v in got] == msgs
