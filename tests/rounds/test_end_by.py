"""`--end-by`: the text a person gives for when a round must end, read as the flow's time.time()."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from flywheel.commands.rounds import end_time

NOW = datetime(2026, 12, 7, 22, 30, 15, tzinfo=timezone(timedelta(hours=1)))


def test_durations_count_from_now() -> None:
    assert end_time("+90m", NOW) == NOW.timestamp() + 5400
    assert end_time("+2h", NOW) == NOW.timestamp() + 7200
    assert end_time(" +600s ", NOW) == NOW.timestamp() + 600
    assert end_time("+1.5h", NOW) == NOW.timestamp() + 5400


def test_a_clock_time_is_the_next_one_in_the_zone_of_now() -> None:
    assert end_time("23:00", NOW) == NOW.replace(hour=23, minute=0, second=0).timestamp()  # later today
    tomorrow = (NOW + timedelta(days=1)).replace(hour=6, minute=0, second=0)
    assert end_time("06:00", NOW) == tomorrow.timestamp()  # already past today: tomorrow's
    assert end_time("22:30:10", NOW) == (NOW + timedelta(days=1)).replace(second=10).timestamp()


def test_an_iso_date_time_is_taken_as_written_and_one_already_past_is_refused() -> None:
    assert end_time("2026-12-08T01:00+00:00", NOW) == datetime(2026, 12, 8, 1, tzinfo=UTC).timestamp()
    with pytest.raises(ValueError, match="already past"):
        end_time("2026-12-07T21:00+01:00", NOW)


@pytest.mark.parametrize("bad", ["soon", "25:00", "12:61", "+5d", "90m", ""])
def test_anything_else_is_a_one_line_error_naming_the_forms(bad: str) -> None:
    with pytest.raises(ValueError, match="--end-by") as e:
        end_time(bad, NOW)
    assert "\n" not in str(e.value)


def test_an_end_with_a_training_deployment_is_refused_before_anything_is_touched(tmp_path) -> None:
    """The deployment's SFT runs elsewhere, so the round could not hold the end: one line, no lake written."""
    from typer.testing import CliRunner

    from flywheel.cli import app

    lake = tmp_path / "lake"
    r = CliRunner().invoke(app, ["round", "run", "--lake", str(lake), "--end-by", "+30m",
                                 "--train-deployment", "train-stage/gpu"])  # fmt: skip
    assert r.exit_code != 0 and not lake.exists()
    assert "--end-by with --train-deployment" in str(r.exception or r.output)
