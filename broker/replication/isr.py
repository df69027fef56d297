"""In-sync replicas judged by lag time (KAFKA-1546), leader side, on injected time.

A follower is caught up at a fetch if it asked for the leader's log end as it stood
then; KAFKA-4485 refines this: if it asked for at least the log end the leader had at
its *previous* fetch, it was caught up as of that previous fetch. So a follower that
keeps reaching the log end within `replica.lag.time.max.ms` stays in the ISR even when
a large batch lands between two fetches, while a stuck one falls out.
Pure logic: the caller passes `now_ms` and the ISR (which it alone holds: the tracker keeps
only the followers' progress) and applies the returned decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class FollowerProgress:
    log_end_offset: int = 0
    last_caught_up_ms: float = 0.0
    last_fetch_leader_leo: int = 0
    last_fetch_ms: float = 0.0


class IsrTracker:
    def __init__(self, leader_id: int, replicas: list[int], now_ms: float, lag_time_max_ms: float) -> None:
        self.leader_id = leader_id
        self.lag_time_max_ms = lag_time_max_ms
        # Kafka starts every follower's clock at replica creation: a follower gets one
        # full lag time to show up before it is dropped.
        self.followers = {b: FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                          for b in replicas if b != leader_id}

    def set_replicas(self, replicas: list[int], now_ms: float) -> None:
        for b in replicas:
            if b != self.leader_id and b not in self.followers:
                self.followers[b] = FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
        for b in list(self.followers):
            if b not in replicas:
                del self.followers[b]

    def on_fetch(self, follower: int, fetch_offset: int, leader_leo: int, now_ms: float) -> bool:
        """Record a fetch from an assigned follower at an offset the leader has; False records nothing.

        A fetch offset is the follower's log end and counts toward the high watermark, so
        one beyond the leader's own log end (a diverged or spoofed follower) must never be
        taken as progress: the caller answers it OFFSET_OUT_OF_RANGE.
        """
        st = self.followers.get(follower)
        if st is None or fetch_offset < 0 or fetch_offset > leader_leo:
            return False
        if fetch_offset >= leader_leo:
            st.last_caught_up_ms = max(st.last_caught_up_ms, now_ms)
        elif fetch_offset >= st.last_fetch_leader_leo:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.last_fetch_leader_leo = leader_leo
        st.last_fetch_ms = now_ms
        st.log_end_offset = fetch_offset
        return True

    def high_watermark(self, isr: Sequence[int], leader_leo: int) -> int:
        """The minimum log end over the ISR."""
        leos = [leader_leo] + [self.followers[b].log_end_offset for b in isr
                               if b != self.leader_id and b in self.followers]
        return min(leos)

    def shrink(self, isr: Sequence[int], leader_leo: int, now_ms: float) -> list[int]:
        """Followers to drop: not caught up for longer than the lag time (and not at the log end)."""
        return [b for b in isr if b != self.leader_id and b in self.followers
                and now_ms - self.followers[b].last_caught_up_ms > self.lag_time_max_ms
                and self.followers[b].log_end_offset != leader_leo]

    def expand(self, isr: Sequence[int], follower: int, high_watermark: int) -> bool:
        """A follower outside the ISR rejoins once its log end reaches the high watermark."""
        st = self.followers.get(follower)
        return st is not None and follower not in isr and st.log_end_offset >= high_watermark
