"""`reassign --verify --watch`'s view of the brokers' metrics: plain lines into a pipe, a live rich bar on a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from broker.tools.reassign_tool import Snapshot, WatchView, copied_fraction, progress_line

FIRST = Snapshot(0.0, remaining={1: 40e6}, copied=0, inbound={1: 1e6}, throttle={1: 5e6},
                 sending={0: 40e6}, leader_inbound={0: 1e6})
CUR = Snapshot(2.0, remaining={1: 32e6}, copied=8e6, lag=8000, inbound={1: 1e6}, throttle={1: 5e6},
               throttled_rate=4.9e6, sending={0: 32e6}, leader_inbound={0: 1e6})
STUCK = Snapshot(4.0, remaining={1: 32e6}, copied=8e6, inbound={1: 6e6}, throttle={1: 5e6},
                 sending={0: 32e6}, leader_inbound={0: 6e6})


def rounds(view: WatchView) -> None:
    view.update(copied_fraction(FIRST, CUR), 3, progress_line(FIRST, FIRST, CUR, 20, 3))
    view.update(copied_fraction(FIRST, STUCK), 3, progress_line(FIRST, CUR, STUCK, 20, 3))
    view.finish()


def test_into_a_pipe_every_round_is_plain_unwrapped_lines() -> None:
    out = io.StringIO()
    # Narrow on purpose: rich must not wrap the long warning line.
    rounds(WatchView(Console(file=out, width=40), 20))
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines
    assert lines[0] == (" 20.0% copied, 3/20 partitions done, 32.00 MB remaining, SumReplicaLag 8000, "
                        "throttled rate 4.90 MB/s, progress 4.00 MB/s")
    assert lines[1] == "ETA 8 s by KIP-73's MoveTime at 5.00 MB/s (busiest broker 1); 8 s at the measured progress"
    assert lines[3].startswith("WARNING: the throttle 5.00 MB/s on broker 1") and "--throttle above 6000000" in lines[3]
    assert lines[4] == "100.0% copied, 20/20 partitions done"
    assert "\x1b" not in out.getvalue()


def test_a_pipe_stays_plain_even_when_rich_is_told_to_colour() -> None:
    out = io.StringIO()
    rounds(WatchView(Console(file=out, force_terminal=True, width=200), 20))  # as with FORCE_COLOR set
    assert "\x1b" not in out.getvalue() and "SumReplicaLag 8000" in out.getvalue()


def test_on_a_terminal_a_live_bar_with_the_same_report() -> None:
    out = io.StringIO()
    rounds(WatchView(Console(file=out, force_terminal=True, width=400), 20, live=True))
    text = out.getvalue()
    assert "━" in text and " 20%" in text and "3/20 partitions done" in text
    assert "SumReplicaLag 8000" in text and "ETA 8 s by KIP-73's MoveTime" in text
    assert "the move cannot finish" in text and "--throttle above 6000000" in text
    assert "100%" in text and "20/20 partitions done" in text
    assert text.endswith("\x1b[?25h")  # the cursor is given back


def test_the_copied_fraction() -> None:
    assert copied_fraction(FIRST, FIRST) == 0.0
    assert abs(copied_fraction(FIRST, CUR) - 0.2) < 1e-12
    assert copied_fraction(FIRST, Snapshot(9.0)) == 1.0
    assert copied_fraction(Snapshot(0.0), Snapshot(1.0)) == 1.0  # nothing to copy
