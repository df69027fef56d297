"""The connection and size bounds in broker.config: Kafka 2.8's keys and defaults, bad values
refused at start naming the key."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, build_config


def test_defaults_are_kafkas() -> None:
    cfg = build_config({"broker.id": "0"})
    assert cfg.message_max_bytes == 1048588
    assert cfg.max_connections == cfg.max_connections_per_ip == 2147483647
    assert cfg.max_connections_per_ip_overrides == {}
    assert cfg.connections_max_idle_ms == 600000
    assert cfg.queued_max_request_bytes == -1
    assert cfg.max_in_flight_requests_per_connection == 16  # the project's pipeline (Kafka: 1)


def test_values_parse() -> None:
    cfg = build_config({"broker.id": "0", "max.connections": "100", "max.connections.per.ip": "10",
                        "max.connections.per.ip.overrides": "127.0.0.2:2, broker-a:50,[::1]:3",
                        "connections.max.idle.ms": "-1", "queued.max.request.bytes": "1048576",
                        "max.in.flight.requests.per.connection": "1"})
    assert (cfg.max_connections, cfg.max_connections_per_ip) == (100, 10)
    assert cfg.max_connections_per_ip_overrides == {"127.0.0.2": 2, "broker-a": 50, "::1": 3}
    assert cfg.connections_max_idle_ms == -1
    assert cfg.queued_max_request_bytes == 1048576
    assert cfg.max_in_flight_requests_per_connection == 1


@pytest.mark.parametrize("key,value", [
    ("max.connections", "-1"), ("max.connections", "many"), ("max.connections.per.ip", "-5"),
    ("max.connections.per.ip.overrides", "127.0.0.1"), ("max.connections.per.ip.overrides", "h:x"),
    ("connections.max.idle.ms", "soon"), ("queued.max.request.bytes", "1.5"), ("message.max.bytes", "-1"),
    ("max.connections.per.ip", "0"), ("max.in.flight.requests.per.connection", "0"),
    ("controlled.shutdown.max.retries", "-1"), ("controlled.shutdown.retry.backoff.ms", "-5"),
    ("controlled.shutdown.retry.backoff.ms", "soon"),
])
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config({"broker.id": "0", key: value})
    assert e.value.key == key


def test_zero_per_ip_with_overrides_is_allowed() -> None:
    cfg = build_config({"broker.id": "0", "max.connections.per.ip": "0",
                        "max.connections.per.ip.overrides": "127.0.0.1:5"})
    assert cfg.max_connections_per_ip == 0


def test_the_cleaners_broker_keys_have_kafkas_defaults_and_bounds() -> None:
    cfg = build_config({"broker.id": "0"})
    assert (cfg.log_cleaner_enable, cfg.log_cleaner_threads, cfg.log_cleaner_dedupe_buffer_size,
            cfg.log_cleaner_min_cleanable_ratio, cfg.log_cleaner_min_compaction_lag_ms,
            cfg.log_cleaner_max_compaction_lag_ms, cfg.log_cleaner_delete_retention_ms, cfg.log_cleaner_backoff_ms,
            cfg.log_segment_delete_delay_ms, cfg.log_cleanup_policy) == (
        True, 1, 134217728, 0.5, 0, (1 << 63) - 1, 86400000, 15000, 60000, "delete")
    assert cfg.log_cleaner_io_max_bytes_per_second == 1.7976931348623157e308
    assert build_config({"broker.id": "0", "log.cleaner.io.max.bytes.per.second": "1048576"}).log_cleaner_io_max_bytes_per_second \
        == 1048576.0
    for key, value in (("log.cleaner.min.cleanable.ratio", "1.1"), ("log.cleaner.threads", "-1"),
                       ("log.cleanup.policy", "tidy"), ("log.cleaner.max.compaction.lag.ms", "0"),
                       ("log.cleaner.io.max.bytes.per.second", "fast")):
        with pytest.raises(ConfigError) as e:
            build_config({"broker.id": "0", key: value})
        assert e.value.key == key
