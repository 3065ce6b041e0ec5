"""``make bench ARGS="--rounds 3"``: the table gives each broker's median run of the rounds
(``benchmarks.run.median_result``)."""

from __future__ import annotations

from benchmarks.amqbench import CASES_BY_KEY, Result
from benchmarks.run import median_result, parse_args


def _result(rate: float | None) -> Result:
    r = Result(broker="ours", case=CASES_BY_KEY["16b"])
    if rate is not None:
        r.figures = {"consumed_per_s": rate}
    else:
        r.error = "amqbench exited 1"
    return r


def test_the_median_run_is_the_middle_one_by_consumed_rate() -> None:
    runs = [_result(300.0), _result(100.0), _result(200.0)]
    assert median_result(runs) is runs[2]


def test_failed_runs_are_left_out_and_an_even_count_takes_the_lower_middle() -> None:
    runs = [_result(400.0), _result(None), _result(100.0)]
    assert median_result(runs) is runs[2]


def test_when_every_run_failed_the_last_one_says_why() -> None:
    runs = [_result(None), _result(None)]
    assert median_result(runs) is runs[1]


def test_rounds_are_bounded() -> None:
    assert parse_args(["--rounds", "3"]).rounds == 3
    for bad in ("0", "21"):
        try:
            parse_args(["--rounds", bad])
        except SystemExit as exc:
            assert exc.code == 2
        else:
            raise AssertionError(f"--rounds {bad} was accepted")
