"""Short, derandomized fuzzing of the readers in CI (bench/bench_fuzz.py runs the same targets for minutes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import fuzz_targets as ft


def ci(n: int) -> settings:
    """CI settings: the same inputs every run (derandomized), no deadline (inputs touch disk)."""
    return settings(
        max_examples=n, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )


@ci(1500)
@given(
    st.one_of(
        st.text(max_size=200),
        st.sampled_from(ft.VALID_ACTIONS)
        .flatmap(lambda a: ft.mutated_bytes(a.encode()))
        .map(lambda b: b.decode("utf-8", "replace")),
    )
)
def test_action_parser_reads_or_refuses(s: str) -> None:
    ft.target_action(s)


@ci(300)
@given(st.lists(st.one_of(ft.hostile_json(ft.rollout_line()), st.just(json.dumps(ft.rollout_line()))), min_size=1, max_size=6)
       .map(lambda ls: "\n".join(ls).encode()).flatmap(lambda b: st.one_of(st.just(b), ft.mutated_bytes(b))))  # fmt: skip
def test_rollout_reader_quarantines_what_it_cannot_read(data: bytes) -> None:
    ft.target_rollout_block(data)


@ci(300)
@given(
    ft.hostile_json(ft.annotation_doc())
    .map(lambda d: d.encode())
    .flatmap(lambda b: st.one_of(st.just(b), ft.mutated_bytes(b, 2)))
)
def test_annotation_reader_quarantines_what_it_cannot_read(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    ft.target_annotation(data, tmp_path_factory.mktemp("ann"))


@pytest.fixture(scope="module")
def fuzz_lake(tmp_path_factory: pytest.TempPathFactory):
    from storage import Lake

    return Lake.open(tmp_path_factory.mktemp("fuzz") / "lake", create=True)


PARTS = ft.PARTS
hostile_bundle = ft.hostile_bundle


@ci(250)
@given(hostile_bundle(), st.data())
def test_bundle_reader_lands_or_quarantines(fuzz_lake, tmp_path_factory: pytest.TempPathFactory, case, data) -> None:
    parts, raw, where, name = case
    work = tmp_path_factory.mktemp("b")
    as_zip = None
    if where == "zip":
        good = ft.zip_folder(ft.write_parts(work / "src", parts))
        as_zip = data.draw(ft.mutated_bytes(good, 3))
    ft.target_bundle(fuzz_lake, parts, raw, as_zip, work, name)


def test_the_valid_seeds_are_valid(fuzz_lake, tmp_path: Path) -> None:
    """The mutations start from inputs the readers accept, so the fuzzing explores near real inputs."""
    assert ft.target_rollout_block(json.dumps(ft.rollout_line()).encode()) == (1, 0)
    assert ft.target_annotation(json.dumps(ft.annotation_doc()).encode(), tmp_path) == (1, 0)
    assert ft.target_bundle(fuzz_lake, PARTS, None, None, tmp_path) == "ok"
    for a in ft.VALID_ACTIONS:
        ft.target_action(a)


@pytest.mark.parametrize("shot", ["screenshots/0000.png", "screenshots/0001.png"])
def test_a_png_with_a_truncated_header_is_quarantined(fuzz_lake, tmp_path: Path, shot: str) -> None:
    """Found by `python -m bench fuzz`: Pillow raises ValueError("Truncated IHDR chunk") for a PNG whose header chunk
    claims fewer than 13 bytes; it was an internal_error (a crash) and is now `screenshot_corrupt`."""
    import struct

    png = PARTS["shots"][shot]
    bad = png[:8] + struct.pack(">I", 4) + png[12:]  # the IHDR chunk's length field says 4
    assert ft.target_bundle(fuzz_lake, PARTS, {shot: bad}, None, tmp_path) == "screenshot_corrupt"
