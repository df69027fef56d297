"""The Spark source's reading rules as pure functions: subscriptions, kafka. options, minPartitions
splitting (Spark's KafkaOffsetRangeCalculator), the lag figures, record headers from RecordBatch v2."""

from __future__ import annotations

import json
import pickle

import pytest

from pipeline.client import MinibrokerError
from pipeline.lag import offsets_behind_latest
from pipeline.options import ReadOptions, Subscription, WriteOptions, duration_ms, java_regex
from pipeline.ranges import Range, split_ranges
from pipeline.rows import ARROW_SCHEMA_WITH_HEADERS, record_batch
from protocol.records.record_batch import LOG_APPEND_TIME, build_batch
from protocol.records.records import decode_records

BASE = {"bootstrap.servers": "h:1"}


def test_subscription_forms_and_spark_messages() -> None:
    assert Subscription.parse({"subscribe": " a, b ,,a"}) == Subscription(topics=("a", "b"))
    assert Subscription.parse({"subscribepattern": "ev-.*"}) == Subscription(pattern="ev-.*")
    assert Subscription.parse({"assign": '{"t": [2, 0], "u": [1]}'}) == Subscription(
        assigned=(("t", 0), ("t", 2), ("u", 1)))
    bad = [({}, "One of the following options must be specified"),
           ({"subscribe": "a", "assign": '{"a": [0]}'}, "Only one of the following options"),
           ({"topic": "a", "subscribe": "b"}, "Only one of the following options"),
           ({"subscribe": " , "}, "No topics to subscribe to"),
           ({"subscribepattern": "  "}, "Pattern to subscribe is empty"),
           ({"subscribepattern": "ev-(unclosed"}, r"subscribePattern: 'ev-\(unclosed' is not a valid pattern"),
           ({"subscribepattern": r"\p{Alpha}+"}, "not a valid pattern"),
           ({"subscribepattern": "[a-z&&[^e]]"}, "class intersection"),
           ({"assign": "t:0"}, "No topicpartitions to assign"),
           ({"assign": '{"t": [0, -1]}'}, "list of partition numbers"),
           ({"assign": '{"t": []}'}, "list of partition numbers")]
    for opts, needle in bad:
        with pytest.raises(MinibrokerError, match=needle):
            Subscription.parse(opts)


def test_java_pattern_semantics() -> None:
    # Java's Matcher.matches(): the whole topic name must match.
    sub = Subscription(pattern="ev-[0-9]+")
    assert sub.matches("ev-12") and not sub.matches("ev-12x") and not sub.matches("xev-1")
    assert java_regex(r"\Qa.b\E-(?<n>x+)").fullmatch("a.b-xx") is not None
    assert java_regex(r"\Qa.b\E").fullmatch("aXb") is None
    assert java_regex("a++b").fullmatch("aab") is not None  # possessive, as in Java


def test_kafka_prefixed_options() -> None:
    r = ReadOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.client.id": "etl",
                           "kafka.request.timeout.ms": "5000", "kafka.max.partition.fetch.bytes": "2048",
                           "kafka.isolation.level": "read_committed", "kafka.group.id": "ignored",
                           "kafka.session.timeout.ms": "1"}, streaming=True)
    assert (r.settings.client_id, r.settings.request_timeout_s, r.fetch_max_bytes) == ("etl", 5.0, 2048)
    # A plain option wins over its kafka. twin.
    assert ReadOptions.parse(BASE | {"subscribe": "t", "fetch.max.bytes": "100", "kafka.fetch.max.bytes": "200"},
                             streaming=False).fetch_max_bytes == 100
    for name, needle in [("kafka.auto.offset.reset", "startingOffsets"), ("kafka.key.deserializer", "keys"),
                         ("kafka.value.deserializer", "values"), ("kafka.enable.auto.commit", "not supported"),
                         ("kafka.interceptor.classes", "not supported"),
                         ("kafka.isolation.level", "must be one of")]:
        with pytest.raises(MinibrokerError, match=needle):
            ReadOptions.parse(BASE | {"subscribe": "t", name: "SSL"}, streaming=True)


JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" '
        'password="bob-pw-secret-9";')


def test_kafka_security_options_build_the_client_security() -> None:
    """Spark's kafka.security.protocol / kafka.ssl.* / kafka.sasl.* options, for reading and writing
    alike; refusals name the option, never a secret value."""
    security = {"kafka.security.protocol": "SASL_SSL", "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": "/certs/ca.pem", "kafka.ssl.endpoint.identification.algorithm": "",
                "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": JAAS}
    for settings in (ReadOptions.parse(BASE | {"subscribe": "t"} | security, streaming=False).settings,
                     WriteOptions.parse(BASE | {"topic": "t"} | security).settings):
        s = settings.security
        assert (s.security_protocol, s.ssl_truststore_location, s.check_hostname, s.sasl_mechanism,
                s.sasl_username, s.sasl_password) == ("SASL_SSL", "/certs/ca.pem", False, "SCRAM-SHA-512", "bob",
                                                      "bob-pw-secret-9")
        assert "bob-pw-secret-9" not in repr(settings)
        assert pickle.loads(pickle.dumps(settings)) == settings  # travels to Spark's workers
    assert ReadOptions.parse(BASE | {"subscribe": "t"}, streaming=False).settings.security.security_protocol == "PLAINTEXT"
    bad = [({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS}, "kafka.sasl.mechanism"),
           ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.jaas.config": JAAS},
            "kafka.sasl.mechanism"),
           ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"}, "kafka.sasl.jaas.config"),
           ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
             "kafka.sasl.jaas.config": JAAS.rstrip(";")}, "kafka.sasl.jaas.config"),
           ({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "JKS"}, "kafka.ssl.keystore.type"),
           ({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.password": "store-pw-secret-9"},
            "kafka.ssl.keystore.password"),
           ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol")]
    for options, needle in bad:
        for parse in (lambda o: ReadOptions.parse(BASE | {"subscribe": "t"} | o, streaming=True),
                      lambda o: WriteOptions.parse(BASE | {"topic": "t"} | o)):
            with pytest.raises(MinibrokerError, match=needle) as e:
                parse(options)
            assert "secret-9" not in str(e.value)


def test_reading_options_defaults_and_checks() -> None:
    r = ReadOptions.parse(BASE | {"subscribe": "t"}, streaming=True)
    assert (r.include_headers, r.fail_on_data_loss, r.min_partitions, r.max_trigger_delay_ms) == (
        False, True, None, 15 * 60_000)
    r = ReadOptions.parse(BASE | {"subscribe": "t", "includeHeaders": "TRUE", "failOnDataLoss": "false",
                                  "minPartitions": "8", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "30s"},
                          streaming=True)
    assert (r.include_headers, r.fail_on_data_loss, r.min_partitions, r.min_offsets_per_trigger,
            r.max_trigger_delay_ms) == (True, False, 8, 10, 30_000)
    assert duration_ms("2h", "x") == 7_200_000 and duration_ms("250", "x") == 250
    bad = [({"includeHeaders": "yes"}, "true or false"), ({"minPartitions": "0"}, "positive"),
           ({"minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "4"}, r"minOffsetsPerTrigger\(5\) is higher"),
           ({"maxTriggerDelay": "soon"}, "duration")]
    for extra, needle in bad:
        with pytest.raises(MinibrokerError, match=needle):
            ReadOptions.parse(BASE | {"subscribe": "t"} | extra, streaming=True)
    # Spark's batch rules.
    for extra, needle in [({"startingOffsets": "latest"}, "can't be latest"),
                          ({"startingOffsets": '{"t": {"0": -1}}'}, "can't be latest"),
                          ({"endingOffsets": "earliest"}, "can't be earliest"),
                          ({"maxOffsetsPerTrigger": "5"}, "streaming queries only")]:
        with pytest.raises(MinibrokerError, match=needle):
            ReadOptions.parse(BASE | {"subscribe": "t"} | extra, streaming=False)


def test_min_partitions_split_as_spark() -> None:
    ranges = [Range("t", 0, 0, 100), Range("t", 1, 0, 10), Range("u", 0, 5, 5)]
    # No minPartitions, or enough ranges with data: unchanged (empty ones dropped once asked).
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges[:2]
    # 110 offsets over 8: t-1 rounds to one part (0.73), so t-0 takes the other 7 of 100 each
    # 100 // 7 = 14, the last ones taking the remainder (Spark: remaining / (parts - part)).
    got = split_ranges(ranges, 8)
    assert [(r.topic, r.partition, r.start, r.end) for r in got] == [
        ("t", 0, 0, 14), ("t", 0, 14, 28), ("t", 0, 28, 42), ("t", 0, 42, 56), ("t", 0, 56, 70),
        ("t", 0, 70, 85), ("t", 0, 85, 100), ("t", 1, 0, 10)]
    # Every offset exactly once.
    covered = sorted((r.topic, r.partition, o) for r in got for o in range(r.start, r.end))
    assert covered == sorted([("t", 0, o) for o in range(100)] + [("t", 1, o) for o in range(10)])
    # Halves round up (Scala's Math.round): 2 equal ranges over 3 -> 1.5 -> 2 parts each.
    two = split_ranges([Range("a", 0, 0, 10), Range("a", 1, 0, 10)], 3)
    assert [(r.partition, r.start, r.end) for r in two] == [(0, 0, 5), (0, 5, 10), (1, 0, 5), (1, 5, 10)]


def test_lag_from_progress() -> None:
    source = {"endOffset": json.dumps({"t": {"0": 10, "1": 4}, "u": {"0": 7}}),
              "latestOffset": json.dumps({"t": {"0": 12, "1": 4}, "u": {"0": 10}})}
    assert offsets_behind_latest(source) == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "3",
                                             "avgOffsetsBehindLatest": "1.6666666666666667"}
    assert offsets_behind_latest({"endOffset": "{}", "latestOffset": None}) == {}


def test_headers_from_record_batch_v2_to_arrow() -> None:
    batch = build_batch([(1000, b"k", b"v", [("trace", b"\x00\x01"), ("empty", None)]), (1001, None, b"w", [])])
    records = decode_records(batch, with_headers=True)
    assert [r.headers for r in records] == [(("trace", b"\x00\x01"), ("empty", None)), ()]
    assert [r.headers for r in decode_records(batch)] == [(), ()]  # only when asked for
    arrow = record_batch("t", 0, records, headers=True)
    assert arrow.schema == ARROW_SCHEMA_WITH_HEADERS
    assert arrow.column("headers").to_pylist() == [[{"key": "trace", "value": b"\x00\x01"},
                                                    {"key": "empty", "value": None}], None]


def test_min_offsets_per_trigger_delays_as_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's delayBatch: a batch waits for minOffsetsPerTrigger new offsets unless maxTriggerDelay
    has passed since the last batch let through."""
    pytest.importorskip("pyspark")
    from pipeline import source

    clock = [1_000_000.0]
    monkeypatch.setattr(source.time, "time", lambda: clock[0])
    options = ReadOptions.parse(BASE | {"subscribe": "t", "minOffsetsPerTrigger": "10", "maxTriggerDelay": "5s"},
                                streaming=True)
    reader = source.MinibrokerStreamReader(options)
    begin = {("t", 0): 0, ("t", 1): 0}
    assert reader._delay(10, begin, {("t", 0): 3, ("t", 1): 2}) is False  # the first batch: the delay has passed
    clock[0] += 1
    assert reader._delay(10, begin, {("t", 0): 3, ("t", 1): 2}) is True  # 5 new < 10, 1 s < 5 s
    assert reader._delay(10, begin, {("t", 0): 6, ("t", 1): 4}) is False  # 10 new
    clock[0] += 2
    assert reader._delay(10, begin, {("t", 0): 1, ("t", 1): 0}) is True
    clock[0] += 3.5  # 5.5 s since the last batch let through
    assert reader._delay(10, begin, {("t", 0): 1, ("t", 1): 0}) is False


def test_log_append_time_batches_say_so() -> None:
    batch = build_batch([(1000, None, b"v", []), (1001, None, b"w", [])], timestamp_type=LOG_APPEND_TIME,
                        log_append_time=5000)
    records = decode_records(batch)
    assert [(r.timestamp, r.timestamp_type) for r in records] == [(5000, 1), (5000, 1)]
    assert record_batch("t", 0, records).column("timestampType").to_pylist() == [1, 1]
    created = decode_records(build_batch([(1000, None, b"v", [])]))
    assert record_batch("t", 0, created).column("timestampType").to_pylist() == [0]
