"""A follower's truncation before it fetches (KIP-101, KIP-279): where to cut, from the leader's answer.

A partition handed to a replica fetcher is first "truncating". If its log holds leader epochs,
the fetcher asks the leader (OffsetForLeaderEpoch v3, with this broker's id and the partition's
current leader epoch for fencing) for the end offset of the follower's latest epoch, and cuts
its log where `truncation_for` says; a log without epochs (magic-1 data from before the
upgrade) is cut to its high watermark, Kafka 0.10's rule. `truncation_for` is Kafka 2.8's
AbstractFetcherThread.getOffsetTruncationState, as pure logic:

- the leader knows no end offset (UNDEFINED): cut to the high watermark;
- the leader answers with an epoch the follower also has: cut to the smaller of the two ends of
  that epoch (and of the follower's log end): done;
- the leader answers a smaller epoch the follower does not have (KIP-279): cut to the end of
  the follower's largest epoch below it and ask again with what is then the latest epoch;
- the follower has no epoch at or below the answered one: cut to the leader's end offset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class Truncation(NamedTuple):
    offset: int
    complete: bool  # False: cut to `offset`, then ask the leader again


def truncation_for(leader_epoch: int, leader_end_offset: int, *, high_watermark: int, log_end_offset: int,
                   own_end_offset_for: Callable[[int], tuple[int, int] | None]) -> Truncation:
    """Where to cut a follower's log, given the leader's (epoch, end offset) for its latest epoch.

    `own_end_offset_for(epoch)` is the follower's own (epoch, end offset) by the same rule the
    leader answers with (the largest epoch <= the one asked), None if it has none.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(high_watermark, log_end_offset), True)
    if leader_epoch == UNDEFINED_EPOCH:
        # A leader answering v0 (no epoch in the response): its offset is all there is.
        return Truncation(min(leader_end_offset, log_end_offset), True)
    own = own_end_offset_for(leader_epoch)
    if own is None:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    own_epoch, own_end = own
    if own_epoch != leader_epoch:
        return Truncation(min(own_end, log_end_offset), False)
    return Truncation(min(own_end, leader_end_offset, log_end_offset), True)
