from __future__ import annotations

import pytest

from broker.zk.config_entities import (
    ALL,
    InvalidConfig,
    desanitize,
    quota_user,
    sanitize,
    split_config_list,
    throttled_partitions,
    validate,
)


def test_split_protects_bracketed_commas() -> None:
    spec = "leader.replication.throttled.replicas=[0:101,0:102],follower.replication.throttled.replicas=0:103"
    assert split_config_list(spec) == {
        "leader.replication.throttled.replicas": "0:101,0:102",
        "follower.replication.throttled.replicas": "0:103",
    }
    with pytest.raises(InvalidConfig):
        split_config_list("novalue")


def test_throttled_partitions_filter_on_this_broker() -> None:
    assert throttled_partitions("0:101,1:102,2:101", 101) == {0, 2}
    assert throttled_partitions(" * ", 7) is ALL and 12345 in ALL
    assert throttled_partitions("", 1) is None
    assert throttled_partitions(None, 1) is None


@pytest.mark.parametrize(("etype", "cfg"), [
    ("brokers", {"leader.replication.throttled.rate": "-1"}),
    ("brokers", {"leader.replication.throttled.rate": "fast"}),
    ("brokers", {"no.such.key": "1"}),
    ("topics", {"leader.replication.throttled.replicas": "0-101"}),
    ("topics", {"follower.replication.throttled.replicas": "*,0:1"}),
    ("clients", {"producer_byte_rate": "0"}),
    ("clients", {"controller_mutation_rate": "nan"}),
])
def test_invalid_values_name_the_key(etype: str, cfg: dict[str, str]) -> None:
    with pytest.raises(InvalidConfig) as e:
        validate(etype, cfg)
    assert e.value.key == next(iter(cfg))


def test_valid_values_parse() -> None:
    assert validate("brokers", {"leader.replication.throttled.rate": "5000000"}) == {
        "leader.replication.throttled.rate": 5_000_000}
    assert validate("clients", {"controller_mutation_rate": "5"}) == {"controller_mutation_rate": 5.0}
    assert validate("topics", {"leader.replication.throttled.replicas": "0:1,1:2"})


def test_the_cleaners_topic_keys_parse_as_kafkas_validators_do() -> None:
    ok = validate("topics", {"cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.25",
                             "min.compaction.lag.ms": "0", "max.compaction.lag.ms": "1",
                             "delete.retention.ms": "9223372036854775807"})
    assert ok["cleanup.policy"] == "compact,delete" and ok["min.cleanable.dirty.ratio"] == 0.25
    for key, value in (("cleanup.policy", "compacted"), ("cleanup.policy", ""), ("cleanup.policy", "compact,,"),
                       ("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "x"),
                       ("min.compaction.lag.ms", "-1"), ("max.compaction.lag.ms", "0"),
                       ("delete.retention.ms", "9223372036854775808"), ("delete.retention.ms", "-5")):
        with pytest.raises(InvalidConfig) as e:
            validate("topics", {key: value})
        assert e.value.key == key


def test_the_cleaner_io_bound_is_a_dynamic_broker_key() -> None:
    assert validate("brokers", {"log.cleaner.io.max.bytes.per.second": "1048576"}) == {
        "log.cleaner.io.max.bytes.per.second": 1048576.0}
    with pytest.raises(InvalidConfig):
        validate("brokers", {"log.cleaner.io.max.bytes.per.second": "-1"})


def test_sanitize_is_kafkas_sanitizer() -> None:
    # Java's URLEncoder keeps letters, digits and .-*_; Kafka then writes * as %2A and space as %20.
    assert sanitize("user a*b~c/d.e-f_g") == "user%20a%2Ab%7Ec%2Fd.e-f_g"
    assert sanitize("é") == "%C3%A9"
    assert desanitize(sanitize("user a*b~c/d")) == "user a*b~c/d"


def test_quota_user_is_the_principals_sanitized_name() -> None:
    assert quota_user("User:ANONYMOUS") == "ANONYMOUS"
    assert quota_user("User:CN=alice,O=x") == "CN%3Dalice%2CO%3Dx"


def test_users_entities_take_the_quota_keys() -> None:
    assert validate("users", {"producer_byte_rate": "1000", "controller_mutation_rate": "2.5"}) == {
        "producer_byte_rate": 1000, "controller_mutation_rate": 2.5}
    with pytest.raises(InvalidConfig):
        validate("users", {"consumer_byte_rate": "0"})
