"""Micro-batches sized by the time they take (``storage.pacing``): the rule, a reader's view of its
micro-batches on a fake clock, and the controller's setting (``kraftlake.controller.max.batch.ms``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftlake.cli.controller import main as controller_main
from kraftlake.cli.controller import max_batch_ms
from kraftlake.cli.launcher import USAGE, UserError, run_job
from kraftlake.metadata.config import load_layers
from kraftlake.storage.pacing import FLOOR_ROWS, Pace, paced_rows

CAP = 50_000
TARGET_S = 10.0


def test_a_slow_micro_batch_shrinks_the_next_to_what_its_pace_fits_in_the_target() -> None:
    assert paced_rows(40_000, 20.0, 40_000, TARGET_S, CAP) == 20_000
    assert paced_rows(40_000, 80.0, 40_000, TARGET_S, CAP) == 5_000
    # a micro-batch cut short by the log's end is still shrunk when it was late
    assert paced_rows(3_000, 30.0, 40_000, TARGET_S, CAP) == FLOOR_ROWS


def test_never_below_the_floor_nor_above_the_cap() -> None:
    assert paced_rows(40_000, 3_600.0, 40_000, TARGET_S, CAP) == 1_000  # 111 rows would fit: the floor
    assert paced_rows(30_000, 1.0, 30_000, TARGET_S, CAP) == 50_000  # 60,000 allowed by growth: the cap
    assert paced_rows(200, 60.0, 200, TARGET_S, 300) == 300  # a cap below the floor is the floor
    assert paced_rows(0, 1.0, 0, TARGET_S, CAP) == 1_000


def test_a_fast_micro_batch_lets_the_next_grow_twice_at_most() -> None:
    assert paced_rows(4_000, 1.0, 4_000, TARGET_S, CAP) == 8_000  # 40,000 would fit in the target
    assert paced_rows(4_000, 8.0, 4_000, TARGET_S, CAP) == 5_000  # its pace allows less than twice
    assert paced_rows(4_000, 0.0, 4_000, TARGET_S, CAP) == 8_000  # a clock that did not move
    # rows past the limit (the rest of a Kafka record batch) count as done
    assert paced_rows(4_016, 5.0, 4_000, TARGET_S, CAP) == 8_032


def test_a_micro_batch_cut_short_by_the_log_s_end_in_time_keeps_the_limit() -> None:
    """Caught up, micro-batches of a few rows are fast: their pace, mostly fixed costs, would shrink the
    limit to the floor, and the first backlog after a quiet spell would start from there."""
    assert paced_rows(30, 1.0, 20_000, TARGET_S, CAP) == 20_000
    assert paced_rows(19_999, 10.0, 20_000, TARGET_S, CAP) == 20_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counted(after: int, end: int) -> int:
    """Rows in (after, end] of a log without gaps."""
    return end - after


def test_a_reader_times_each_micro_batch_from_its_plan_to_the_next_ask() -> None:
    clock = Clock()
    pace = Pace(10_000, CAP, clock)
    assert pace.rows(-1, counted) == 1_000  # nothing timed yet: the floor
    pace.plan(-1, 999, 1_000)
    pace.run(-1, 999)
    clock.now += 2.0
    assert pace.rows(999, counted) == 2_000  # 1,000 rows in 2 s: twice, the most a step grows
    clock.now += 30.0
    assert pace.rows(999, counted) == 2_000  # asked again with nothing new: the same, not timed again
    pace.plan(999, 2_999, 2_000)
    clock.now += 40.0
    assert pace.rows(2_999, counted) == 1_000  # 2,000 rows in 40 s: 500 would fit, the floor
    pace.plan(2_999, 3_999, 1_000)
    start, sizes = 3_999, []
    for _ in range(7):  # fast and full micro-batches
        clock.now += 0.5
        sizes.append(pace.rows(start, counted))
        pace.plan(start, start + sizes[-1], sizes[-1])
        start += sizes[-1]
    assert sizes == [2_000, 4_000, 8_000, 16_000, 32_000, 50_000, 50_000]


def test_a_micro_batch_planned_before_the_reader_is_timed_from_its_creation() -> None:
    """A restart or a standby's takeover first runs the micro-batch its predecessor planned (Spark asks for
    its partitions, never for its offsets), then asks for the next."""
    clock = Clock()
    pace = Pace(10_000, CAP, clock)
    clock.now += 5.0  # the query starting
    pace.run(10_000, 30_000)
    clock.now += 15.0
    assert pace.rows(30_000, counted) == 10_000  # 20,000 rows in 20 s since the reader was made


def test_a_start_the_reader_did_not_see_end_plans_the_floor() -> None:
    clock = Clock()
    pace = Pace(10_000, CAP, clock)
    pace.run(0, 500)
    clock.now += 1.0
    assert pace.rows(7_000, counted) == 1_000  # the micro-batch that ended at 7,000 was not run here


def test_the_controller_s_setting_is_for_continuous_runs_and_must_exceed_the_trigger_interval(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    def bound(once: bool = False, **values: str) -> int | None:
        settings = {f"kraftlake.controller.{k.replace('_', '.')}": v for k, v in values.items()}
        return max_batch_ms(load_layers(None, [(settings, "--override")]), once)

    assert bound() == 15_000  # the default
    assert bound(max_batch_ms="4000") == 4_000
    assert bound(max_batch_ms="0") is None
    assert bound(once=True) is None  # a replay: the cap alone
    assert bound(max_batch_ms="4000", trigger_interval_ms="60000", once=True) is None
    with pytest.raises(UserError, match="must exceed kraftlake.controller.trigger.interval.ms=4000"):
        bound(max_batch_ms="4000", trigger_interval_ms="4000")

    for value, said in (("-5", "'-5' (from --override): expected an integer >= 0"),
                        ("soon", "'soon' (from --override): expected an integer"),
                        ("500", "500 must exceed kraftlake.controller.trigger.interval.ms=1000")):
        code = run_job("controller", controller_main, ["--warehouse", str(tmp_path / "w"), "--override",
                                                       f"kraftlake.controller.max.batch.ms={value}"])
        assert code == USAGE
        err = capsys.readouterr().err.strip()
        assert err.startswith("controller: kraftlake.controller.max.batch.ms") and said in err and "\n" not in err
