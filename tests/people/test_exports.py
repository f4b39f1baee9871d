"""Exports load with Hugging Face `datasets` (offline), carry their images, and record the pile's Delta version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.people.helpers import populate
from training.exports import KINDS, export, read_lineage


def _load(path: Path, cache: Path):
    from datasets import load_dataset

    return load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))


@pytest.fixture
def pile(lake):
    return lake, populate(lake, rounds=(1, 2), per_source=3)


def test_sft_trl_is_conversational_with_images(pile, tmp_path: Path) -> None:
    lake, exp = pile
    res = export(lake, "sft-trl", tmp_path / "trl")
    ds = _load(res.data_file, tmp_path / "cache")
    assert len(ds) == exp["n_sft"] == res.rows
    ex = ds[0]
    roles = [m["role"] for m in ex["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    n_image_items = sum(c["type"] == "image" for m in ex["messages"] for c in m["content"])
    assert n_image_items == len(ex["images"]) == 2
    assert ex["images"][0].size == (64, 40)  # decoded as PIL images from the object store's PNG bytes
    assert (ex["width"], ex["height"], ex["coordinates"]) == (64, 40, "pixel")  # the actions' pixel space
    answer = ex["messages"][2]["content"][0]["text"]
    assert answer.startswith("Thought: ") and "\nAction: click(point='<point>10 20</point>')" in answer
    assert ex["messages"][1]["content"][-1]["text"].startswith("Instruction: Open the ")
    assert res.images == 2 * exp["n_sft"] and res.missing_images == 0
    # --max-images keeps only the last K screenshots
    one = export(lake, "sft-trl", tmp_path / "trl1", max_images=1)
    assert len(_load(one.data_file, tmp_path / "cache")[0]["images"]) == 1


def test_sft_verl_has_the_verl_columns_and_a_validation_split_by_task(pile, tmp_path: Path) -> None:
    from training.exports import split_of

    lake, exp = pile
    res = export(lake, "sft-verl", tmp_path / "verl", val_fraction=0.4)
    assert sorted(p.name for p in res.files.values()) == ["train.parquet", "validation.parquet"]
    train, val = (_load(res.files[s], tmp_path / "cache") for s in ("train", "validation"))
    assert set(train.column_names) == {"data_source", "prompt", "images", "ability", "reward_model", "agent_name",
                                       "extra_info"}  # fmt: skip
    assert len(train) + len(val) == exp["n_sft"] == res.rows and len(train) > 0 and len(val) > 0
    assert res.split_rows == {"train": len(train), "validation": len(val)}
    # deterministic by task: every task wholly in one split, the one its id's hash says
    for ds, split in ((train, "train"), (val, "validation")):
        assert {e["split"] for e in ds["extra_info"]} == {split}
        assert all(split_of(e["task_id"], 0.4) == split for e in ds["extra_info"])
    again = export(lake, "sft-verl", tmp_path / "verl2", val_fraction=0.4)
    assert again.split_rows == res.split_rows
    # no task hashes below the fraction: the lowest-hash task still makes a validation split
    none = export(lake, "sft-verl", tmp_path / "verl3", val_fraction=0.0)
    assert none.split_rows == res.split_rows  # here task-0 (hash 0.375) is the lowest of task-0 and task-1
    ex = train[0]
    assert [m["role"] for m in ex["prompt"]] == ["system", "user"] and ex["prompt"][1]["content"].startswith(
        "<image>Instruction:"
    )
    assert "gui_act" in ex["prompt"][0]["content"] and ex["agent_name"] == "tool_agent"
    assert ex["reward_model"]["style"] == "rule"
    truth = json.loads(ex["reward_model"]["ground_truth"])
    assert truth["actions"][-1] == "finished(content='done')"
    info = ex["extra_info"]
    assert (
        info["need_tools_kwargs"]
        and json.loads(info["tools_kwargs"]["gui_act"]["create_kwargs"]["ground_truth"]) == truth
    )
    assert [t["action"] for t in info["turns"]] == truth["actions"] and info["turns"][0]["observation"].startswith(
        "[button]"
    )
    assert (info["width"], info["height"], info["coordinates"]) == (64, 40, "pixel")
    assert sorted(e["index"] for e in list(train["extra_info"]) + list(val["extra_info"])) == list(range(exp["n_sft"]))
    ids = {e["episode_id"] for e in list(train["extra_info"]) + list(val["extra_info"])}
    assert ids == set(lake.read("sft", ["episode_id"]).column(0).to_pylist())


def test_ct_text_and_preferences(pile, tmp_path: Path) -> None:
    lake, exp = pile
    ct = _load(export(lake, "ct-text", tmp_path / "ct").data_file, tmp_path / "cache")
    assert len(ct) == exp["n_ct"]
    assert ct[0]["text"].startswith("Instruction: Open the ") and "Step 1: Thought:" in ct[0]["text"]
    assert ct[0]["reasons"] == ["outcome:env_failed"]
    prefs = _load(export(lake, "preferences", tmp_path / "p").data_file, tmp_path / "cache")
    assert len(prefs) == exp["n_pairs"] > 0
    assert prefs[0]["chosen"] != prefs[0]["rejected"] and prefs[0]["prompt"].startswith("Instruction:")


def test_exports_record_the_pile_version_and_pin_it(pile, tmp_path: Path) -> None:
    lake, exp = pile
    v = lake.version("sft")
    res = export(lake, "sft-trl", tmp_path / "a")
    side = json.loads(res.sidecar.read_text())
    assert read_lineage(res.data_file)["table_version"] == side["table_version"] == v == res.table_version
    assert side["rows"] == exp["n_sft"] and len(side["sha256"]) == 64
    populate(lake, rounds=(3,), per_source=3)  # the pile grows
    assert lake.version("sft") > v
    old = export(lake, "sft-trl", tmp_path / "b", version=v)
    assert old.rows == exp["n_sft"] and read_lineage(old.data_file)["table_version"] == v
    new = export(lake, "sft-trl", tmp_path / "c", round=3)
    assert new.rows == 6  # round 3 only: 2 of 3 episodes pass per source
    assert set(_load(new.data_file, tmp_path / "cache")["round"]) == {3}
    with pytest.raises(ValueError, match="unknown export"):
        export(lake, "sft-csv", tmp_path / "d")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["data.parquet", "flywheel_export.json"]


def test_trl_export_from_an_s3_lake(s3_lake, tmp_path: Path) -> None:
    exp = populate(s3_lake, rounds=(1,), per_source=3)
    res = export(s3_lake, "sft-trl", tmp_path / "trl")
    ds = _load(res.data_file, tmp_path / "cache")
    assert len(ds) == exp["n_sft"] and ds[0]["images"][0].size == (64, 40)
    assert read_lineage(res.data_file)["lake"].startswith("s3://")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_empty_pile_is_refused_in_one_line_or_written_with_its_schema(lake, kind: str, tmp_path: Path) -> None:
    import datasets
    import pyarrow.parquet as pq

    with pytest.raises(ValueError, match="nothing to export: table .* has no rows") as e:
        export(lake, kind, tmp_path / kind)  # a fresh lake: every pile empty
    assert "\n" not in str(e.value) and not (tmp_path / kind / "data.parquet").exists()
    res = export(lake, kind, tmp_path / kind, allow_empty=True)
    t = pq.read_table(res.data_file)
    ds = datasets.Dataset(t)
    assert res.rows == 0 and t.num_rows == 0 and len(ds) == 0
    assert ds.features == datasets.Features.from_arrow_schema(t.schema) and len(ds.features) >= 1
    assert read_lineage(res.data_file)["kind"] == kind


def test_every_kind_is_tested() -> None:
    assert set(KINDS) == {"sft-trl", "sft-verl", "ct-text", "preferences"}
