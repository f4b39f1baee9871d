"""The demo's landing area belongs to one lake (training.demo.claim_landing): a new lake made where an old one was
removed must not land the old run's files."""

from __future__ import annotations

from pathlib import Path

from training.demo import LANDING_OWNER, claim_landing


def _fill(landing: Path) -> None:
    (landing / "rollouts").mkdir(parents=True)
    (landing / "rollouts" / "rollouts-round1-ckpt-x.jsonl").write_text("{}\n")


def test_a_new_landing_area_is_made_and_marked(tmp_path: Path) -> None:
    landing = tmp_path / "lake-landing"
    assert claim_landing(landing, "lake-a", lake_started=False) is None
    assert (landing / LANDING_OWNER).read_text().strip() == "lake-a"
    assert claim_landing(landing, "lake-a", lake_started=True) is None  # its own: nothing moves


def test_another_lakes_landing_area_is_moved_aside_not_deleted(tmp_path: Path) -> None:
    landing = tmp_path / "lake-landing"
    claim_landing(landing, "lake-a", lake_started=False)
    _fill(landing)
    for started in (False, True):  # marked for another lake: stale whether or not the new lake has started
        moved = claim_landing(landing, f"lake-b{started}", lake_started=started)
        assert moved is not None and moved.parent == tmp_path and moved.name.startswith("lake-landing.")
        assert sorted(p.name for p in landing.iterdir()) == [LANDING_OWNER]  # empty but for the new mark
        assert (landing / LANDING_OWNER).read_text().strip() == f"lake-b{started}"
        if not started:
            assert (moved / "rollouts" / "rollouts-round1-ckpt-x.jsonl").is_file()  # kept, beside
            _fill(landing)


def test_an_unmarked_landing_area_is_kept_by_a_started_lake_and_moved_by_a_new_one(tmp_path: Path) -> None:
    landing = tmp_path / "lake-landing"
    _fill(landing)  # written before the mark existed
    assert claim_landing(landing, "lake-a", lake_started=True) is None
    assert (landing / "rollouts" / "rollouts-round1-ckpt-x.jsonl").is_file()
    assert (landing / LANDING_OWNER).read_text().strip() == "lake-a"

    other = tmp_path / "other-landing"
    _fill(other)
    moved = claim_landing(other, "lake-c", lake_started=False)
    assert moved is not None and (moved / "rollouts" / "rollouts-round1-ckpt-x.jsonl").is_file()
    assert not (other / "rollouts").exists()
