"""broker.zk.layout.assignment_shape and grow_assignment: a topic znode read and grown as bytes.

The admin request paths use them instead of decoding the whole assignment (up to ~130,000
partitions), so they must agree with decode_assignment on every znode the broker or Kafka's
tools write: compact or spaced JSON, version 1 or 2 with adding/removing replicas.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.zk import layout as L

replica_lists = st.lists(st.integers(0, 100_000), min_size=1, max_size=5, unique=True)
assignments = st.lists(replica_lists, min_size=0, max_size=40).map(lambda rs: dict(enumerate(rs)))


def _kafka_v2(assignment: dict[int, list[int]], spaced: bool) -> bytes:
    """A version-2 znode as Kafka 2.8 writes it (or pretty-printed, as a person might)."""
    body = {"version": 2, "partitions": {str(p): r for p, r in assignment.items()},
            "adding_replicas": {"0": [7]} if assignment else {}, "removing_replicas": {}}
    return json.dumps(body, separators=(", ", ": ") if spaced else (",", ":")).encode()


@given(assignments)
def test_shape_of_our_own_znodes(assignment: dict[int, list[int]]) -> None:
    shape = L.assignment_shape(L.encode_assignment(assignment))
    assert shape.partitions == len(assignment)
    assert shape.replication_factor == (len(assignment[0]) if assignment else 1)


@given(assignments, st.booleans())
def test_shape_of_kafka_znodes(assignment: dict[int, list[int]], spaced: bool) -> None:
    shape = L.assignment_shape(_kafka_v2(assignment, spaced))
    assert shape.partitions == len(assignment)
    assert shape.replication_factor == (len(assignment[0]) if assignment else 1)


@given(assignments, st.lists(replica_lists, min_size=1, max_size=20), st.booleans(), st.booleans())
def test_grown_znode_decodes_to_both(assignment: dict[int, list[int]], new: list[list[int]],
                                     kafka: bool, spaced: bool) -> None:
    data = _kafka_v2(assignment, spaced) if kafka else L.encode_assignment(assignment)
    additions = {len(assignment) + i: r for i, r in enumerate(new)}
    grown = L.grow_assignment(data, L.assignment_shape(data), additions)
    assert L.decode_assignment(grown) == {**assignment, **additions}
    after = json.loads(grown)
    before = json.loads(data)
    # Everything but the partitions is kept as it was (version, adding/removing replicas).
    assert {k: v for k, v in after.items() if k != "partitions"} == {k: v for k, v in before.items()
                                                                      if k != "partitions"}


def test_not_a_topic_znode() -> None:
    with pytest.raises(ValueError):
        L.assignment_shape(b'{"version":1}')
    with pytest.raises(ValueError):
        L.assignment_shape(b"")
