"""The seed corpus and the mutator, without a broker: a seed for every served API, reproducible cases."""

from __future__ import annotations

import struct

import broker.apis  # noqa: F401 - registers every served API
from broker.apis.registry import registered
from protocol.api_keys import ApiKey
from protocol.headers import decode_request_header
from protocol.schema import request_codec
from tests.fuzz.mutate import Mutator
from tests.fuzz.seeds import endpoints_safe, load_seeds, retarget


def test_a_seed_for_every_served_api() -> None:
    have = {s.api_key for s in load_seeds()}
    missing = [a.name for a in registered() if a.key not in have]
    assert missing == []


def test_seeds_are_requests_of_served_versions_that_decode() -> None:
    served = {a.key: a.versions for a in registered()}
    for s in load_seeds():
        header, at = decode_request_header(s.frame)
        assert (header.api_key, header.api_version) == (s.api_key, s.api_version), s.name
        lo, hi = served[ApiKey(s.api_key)]
        assert lo <= s.api_version <= hi, s.name
        if s.api_key not in (ApiKey.PRODUCE, ApiKey.FETCH):  # those two have struct codecs in the broker
            request_codec(s.api_key, s.api_version).decode(memoryview(s.frame)[at:])


def test_retarget_points_every_endpoint_at_the_broker_under_test() -> None:
    for s in load_seeds():
        t = retarget(s, 23456)
        assert endpoints_safe(t.frame, 23456), s.name
        if s.api_key in (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA):
            assert not endpoints_safe(t.frame, 23457), s.name


def test_mutator_is_reproducible_and_frames_what_it_says() -> None:
    seeds = [retarget(s, 23456) for s in load_seeds()]
    a, b = Mutator(seeds, 7, 1 << 20), Mutator(seeds, 7, 1 << 20)
    cases = [a.next() for _ in range(3000)]
    assert cases == [b.next() for _ in range(3000)]
    assert cases != [Mutator(seeds, 8, 1 << 20).next() for _ in range(3000)]
    for c in cases:
        (size,) = struct.unpack_from(">i", c.data)
        if c.complete:
            assert size == len(c.data) - 4, c.what
    kinds = " ".join(c.what for c in cases)
    for kind in ("unchanged", "splice", "size=", "garbage", "bitflip", "int32@", "int16@", "insert@", "delete@",
                 "truncate@", "header", "dup@"):
        assert kind in kinds, kind
