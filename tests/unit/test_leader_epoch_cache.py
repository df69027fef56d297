"""LeaderEpochCache against Kafka 2.8's LeaderEpochFileCacheTest cases (same inputs, same answers).

Kafka's cache reads the log end offset through a callback; ours takes it as an argument of
end_offset_for, so each case passes the log end offset its Kafka twin had set at that point.
"""

from __future__ import annotations

from broker.log.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache()
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_previous_epoch() -> None:
    c = LeaderEpochCache()
    assert c.previous_epoch is None
    c.assign(2, 10)
    assert c.previous_epoch is None
    c.assign(4, 15)
    assert c.previous_epoch == 2
    c.assign(10, 20)
    assert c.previous_epoch == 4
    c.truncate_from_end(18)
    assert c.previous_epoch == 2


def test_should_add_epoch_and_message_offset_to_cache() -> None:
    c = cache_of((2, 10))
    assert c.latest_epoch == 2
    assert c.entries[0] == EpochEntry(2, 10)
    assert c.end_offset_for(2, 11) == (2, 11)


def test_should_return_log_end_offset_if_latest_epoch_requested() -> None:
    c = cache_of((2, 11), (2, 12))
    assert c.end_offset_for(2, 14) == (2, 14)


def test_should_return_undefined_offset_if_undefined_epoch_requested() -> None:
    c = cache_of((2, 11), (3, 12))
    assert c.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_should_not_overwrite_log_end_offset_for_a_leader_epoch_once_assigned() -> None:
    c = cache_of((2, 9))
    assert c.assign(2, 10) is False
    assert c.entries == [EpochEntry(2, 9)]


def test_should_enforce_monotonically_increasing_start_offsets() -> None:
    c = cache_of((2, 9), (3, 9))
    assert c.entries == [EpochEntry(3, 9)]


def test_should_not_overwrite_offset_for_a_leader_epoch_once_assigned() -> None:
    c = cache_of((2, 6), (2, 10))
    assert c.entries[0].start_offset == 6


def test_should_return_unsupported_if_no_epoch_recorded() -> None:
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED


def test_should_return_unsupported_if_no_epoch_recorded_and_undefined_epoch_requested() -> None:
    assert LeaderEpochCache().end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_should_return_first_epoch_if_requested_epoch_less_than_first_epoch() -> None:
    c = cache_of((5, 11), (6, 12), (7, 13))
    assert c.end_offset_for(4, 0) == (4, 11)


def test_should_truncate_if_matching_epoch_but_earlier_starting_offset() -> None:
    c = cache_of((5, 11), (6, 12), (7, 13))
    c.assign(7, 12)  # epoch 7 starts at an earlier offset
    assert c.end_offset_for(5, 0) == (5, 12)
    assert c.end_offset_for(6, 0) == (5, 12)


def test_should_get_first_offset_of_subsequent_epoch_when_offset_requested_for_previous_epoch() -> None:
    c = cache_of((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert c.end_offset_for(2, 17) == (2, 15)


def test_should_return_next_available_epoch_if_there_is_no_exact_epoch_for_the_one_requested() -> None:
    c = cache_of((0, 10), (2, 13), (4, 17))
    assert c.end_offset_for(1, 0) == (0, 13)  # KIP-279: the largest epoch <= 1, and its end
    assert c.end_offset_for(2, 0) == (2, 17)
    assert c.end_offset_for(3, 0) == (2, 17)


def test_should_not_update_epoch_and_start_offset_if_it_did_not_change() -> None:
    c = cache_of((2, 6), (2, 7))
    assert c.entries == [EpochEntry(2, 6)]


def test_should_return_invalid_offset_if_epoch_is_requested_which_is_not_currently_tracked() -> None:
    c = cache_of((2, 100))
    assert c.end_offset_for(3, 100) == UNDEFINED


def test_should_support_epochs_that_do_not_start_from_zero() -> None:
    c = cache_of((2, 6))
    assert c.end_offset_for(2, 7) == (2, 7)
    assert c.entries == [EpochEntry(2, 6)]


def test_should_enforce_monotonically_increasing_epochs() -> None:
    c = cache_of((1, 5), (2, 6))
    c.assign(1, 7)  # an epoch from the past at a later offset: the later epochs go
    assert c.latest_epoch == 1
    assert c.end_offset_for(1, 8) == (1, 8)
    assert c.end_offset_for(2, 8) == UNDEFINED
    assert c.entries == [EpochEntry(1, 7)]


def test_should_enforce_offsets_increase_monotonically() -> None:
    c = cache_of((2, 6), (3, 5))
    assert c.entries == [EpochEntry(3, 5)]


def test_should_increase_and_track_epochs_as_leaders_change_many_times() -> None:
    c = cache_of((0, 0), (1, 0))
    assert c.latest_epoch == 1
    assert c.end_offset_for(1, 0) == (1, 0)
    assert c.end_offset_for(0, 0) == (0, 0)
    assert c.end_offset_for(1, 5) == (1, 5)
    assert c.end_offset_for(0, 5) == (0, 0)
    c.assign(2, 5)
    assert c.end_offset_for(2, 10) == (2, 10)
    assert c.end_offset_for(1, 10) == (1, 5)
    assert c.end_offset_for(0, 10) == (0, 0)


def test_should_increase_and_track_epochs_as_follower_receives_many_messages() -> None:
    c = cache_of((0, 0), (0, 1), (0, 2))
    assert c.latest_epoch == 0
    assert c.end_offset_for(0, 3) == (0, 3)
    for start in (3, 4, 5):
        c.assign(1, start)
    assert c.latest_epoch == 1
    assert c.end_offset_for(1, 6) == (1, 6)
    for start in (6, 7, 8):
        c.assign(2, start)
    assert c.latest_epoch == 2
    assert c.end_offset_for(2, 9) == (2, 9)
    assert c.end_offset_for(0, 9) == (0, 3)
    assert c.end_offset_for(1, 9) == (1, 6)


def test_should_drop_entries_on_epoch_boundary_when_removing_latest_entries() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    c.truncate_from_end(8)
    assert c.entries == [EpochEntry(2, 6)]


def test_should_preserve_reset_offset_on_clear_earliest_if_one_exists() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(8)
    assert c.entries == [EpochEntry(3, 8), EpochEntry(4, 11)]


def test_should_update_saved_offset_when_offset_to_clear_to_is_between_epochs() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(9)
    assert c.entries == [EpochEntry(3, 9), EpochEntry(4, 11)]


def test_should_not_clear_anything_if_offset_too_early() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_start(1) is False
    assert c.entries == [EpochEntry(2, 6), EpochEntry(3, 8), EpochEntry(4, 11)]


def test_should_not_clear_anything_if_offset_to_first_offset() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_start(6) is False  # nothing changed: no checkpoint to rewrite
    assert c.entries == [EpochEntry(2, 6), EpochEntry(3, 8), EpochEntry(4, 11)]


def test_should_retain_latest_epoch_on_clear_all_earliest() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(11)
    assert c.entries == [EpochEntry(4, 11)]


def test_should_update_offset_between_epoch_boundaries_on_clear_earliest_2() -> None:
    c = cache_of((0, 0), (1, 7), (2, 10))
    c.truncate_from_start(5)
    assert c.entries == [EpochEntry(0, 5), EpochEntry(1, 7), EpochEntry(2, 10)]


def test_should_retain_latest_epoch_on_clear_all_earliest_and_update_its_offset() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(15)
    assert c.entries == [EpochEntry(4, 15)]


def test_should_drop_entries_between_epoch_boundary_when_removing_newest() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    c.truncate_from_end(9)
    assert c.latest_epoch == 3
    assert c.entries == [EpochEntry(2, 6), EpochEntry(3, 8)]


def test_should_clear_all_entries() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    assert c.clear() is True
    assert c.entries == []


def test_should_not_reset_epoch_history_head_or_tail_if_undefined_passed() -> None:
    c = cache_of((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_start(UNDEFINED_EPOCH_OFFSET) is False
    assert c.truncate_from_end(UNDEFINED_EPOCH_OFFSET) is False
    assert len(c) == 3


def test_empty_cache() -> None:
    c = LeaderEpochCache()
    assert c.latest_epoch is None
    assert c.end_offset_for(7, 0) == UNDEFINED
    assert c.truncate_from_start(7) is False
    assert c.truncate_from_end(7) is False


def test_invalid_entries_are_refused() -> None:
    c = LeaderEpochCache()
    for epoch, start in ((-1, 0), (0, -1)):
        try:
            c.assign(epoch, start)
        except ValueError:
            continue
        raise AssertionError(f"({epoch}, {start}) accepted")


def test_epoch_for_offset() -> None:
    """The seam for ListOffsets v4: which leader epoch wrote an offset."""
    c = cache_of((2, 6), (3, 8), (4, 11))
    assert [c.epoch_for_offset(o) for o in (0, 5, 6, 7, 8, 10, 11, 500)] == [None, None, 2, 2, 3, 3, 4, 4]
