"""kcat (Debian, librdkafka 2.0.2): produce keyed messages with every codec, read them back with -o beginning."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from tests.support.messages import N_MESSAGES, expected_messages
from tests.support.topics import create_topic

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("acks", ["1", "all"])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_round_trip(client_broker, tmp_path, acks: str, codec: str) -> None:  # noqa: ANN001
    topic = f"kcat-{codec}-{acks}"
    asyncio.run(create_topic(client_broker, topic))
    msgs = expected_messages(topic)
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(k + b"\t" + v + b"\n" for k, v in msgs))
    produced = subprocess.run(
        ["kcat", "-b", client_broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec,
         "-X", f"acks={acks}", "-X", "linger.ms=5", "-l", str(src)],
        capture_output=True, timeout=120)
    assert produced.returncode == 0, produced.stderr.decode()[-2000:]
    consumed = subprocess.run(
        ["kcat", "-b", client_broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-f", "%o\t%k\t%s\n"],
        capture_output=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr.decode()[-2000:]
    lines = consumed.stdout.split(b"\n")[:-1]
    assert len(lines) == N_MESSAGES
    got = [tuple(line.split(b"\t")) for line in lines]
    assert [int(o) for o, _, _ in got] == list(range(N_MESSAGES))
    assert [(k, v) for _, k, v in got] == msgs
