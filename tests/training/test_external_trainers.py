"""The external-command backend's documented templates, run for real: TRL's own CLI (`trl sft`, TRL from PyPI)
trains a tiny VLM on the sft-trl export for a few steps inside a round's SFT stage, which records the checkpoint;
each stage gets its export as a data file and a folder `datasets` loads."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.tiny_vlm import build_tiny_vlm
from tests.people.helpers import populate
from training.backend import CommandBackend
from training.checkpoints import extract, publish_folder
from training.exports import SYSTEM_PROMPT

#: The TRL template of docs/training.md ("Bring your own"), sized to a few CPU steps.
TRL = str(Path(sys.executable).with_name("trl"))
TRL_TEMPLATE = (
    TRL + " sft --model_name_or_path {base} --dataset_name {pile_dir} --output_dir {out} --max_steps 4 "
    "--per_device_train_batch_size 2 --learning_rate 1e-3 --logging_steps 1 --save_strategy no --report_to none "
    "--use_cpu true"
)


@pytest.fixture
def vlm_lake(lake, tmp_path: Path):
    """A lake with an SFT pile of screenshots and a tiny VLM as round 0's checkpoint."""
    populate(lake, rounds=(1,), per_source=3)
    folder = build_tiny_vlm(tmp_path / "vlm", [SYSTEM_PROMPT, "Instruction: Open the report"] * 20)
    return lake, publish_folder(lake, folder)


def _weights(folder: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    return torch.cat([t.flatten().float() for _, t in sorted(load_file(folder / "model.safetensors").items())])


@pytest.mark.slow
def test_trl_cli_trains_a_vlm_on_the_export_in_a_round_that_records_its_checkpoint(vlm_lake, tmp_path: Path) -> None:
    from flows.config import load_round_config
    from flows.stages import RoundContext, mark, run_stage, stage_status

    lake, base = vlm_lake
    mark(lake, 0, "sft", "done", checkpoint=base)  # round 0 ended with the VLM: round 1's SFT starts from it
    conf = tmp_path / "byo.toml"  # the round config of docs/bring-your-own.md
    conf.write_text(f'people = "scripted"\n[flywheel]\nbackend = "{TRL_TEMPLATE}"\n')
    cfg = load_round_config(conf)
    assert cfg.flywheel.backend == TRL_TEMPLATE
    info = run_stage(RoundContext(lake, 1, tmp_path / "landing", cfg), "sft")
    st = stage_status(lake, 1)["sft"]
    assert st["status"] == "done" and st["checkpoint"] == info["checkpoint"] != base
    assert st["checkpoint"].startswith("objects/") and st["base"] == base
    row = [r for r in lake.read("training_runs").to_pylist() if r["output_checkpoint"] == st["checkpoint"]][0]
    assert row["base_checkpoint"] == base and row["backend"] == "command:trl" and row["samples"] == 6
    metrics = json.loads(row["metrics"])
    losses = [float(ast.literal_eval(d)["loss"]) for d in re.findall(r"\{'loss'[^}]*\}", metrics["stdout_tail"])]
    assert len(losses) == 4 and losses[-1] < losses[0], losses  # TRL's own log: 4 steps, the loss falls
    out = extract(lake, st["checkpoint"])
    assert json.loads((out / "config.json").read_text())["model_type"] == "llava"
    assert (out / "processor_config.json").is_file()  # a whole VLM checkpoint: model, tokenizer, processor
    assert not torch.equal(_weights(out), _weights(extract(lake, base)))


def test_each_stage_gets_its_export_as_a_file_and_a_loadable_folder(vlm_lake, tmp_path: Path) -> None:
    lake, base = vlm_lake
    seen = tmp_path / "seen.json"
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, shutil, sys\n"
        "from datasets import load_dataset\n"
        "pile, pile_dir, val, base, out, reward, tools, seen = sys.argv[1:9]\n"
        "ds = load_dataset(pile_dir)\n"
        "json.dump({'pile': pile, 'val': val, 'splits': {k: len(v) for k, v in ds.items()}, 'columns': ds['train'].column_names,"
        " 'reward': open(reward).read(200), 'tools': open(tools).read()}, open(seen, 'w'))\n"
        "shutil.copytree(base, out, dirs_exist_ok=True)\n"
    )
    template = (
        f"{sys.executable} {probe} {{pile}} {{pile_dir}} {{val}} {{base}} {{out}} {{reward}} {{tool_config}} {seen}"
    )
    for stage, kind in (("sft", "sft-trl"), ("rl", "sft-verl"), ("ct", "ct-text")):
        res, pol = CommandBackend(template).run(lake, stage, 1, base)
        got = json.loads(seen.read_text())
        assert res.output_checkpoint == base and pol is None  # the VLM came back unchanged; not a built-in Policy
        if kind == "sft-verl":
            assert Path(got["pile"]).name == "train.parquet" and Path(got["val"]).name == "validation.parquet"
            assert set(got["splits"]) == {"train", "validation"} and "agent_name" in got["columns"]
            assert "verl's reward" in got["reward"]  # the shipped reward module's path
            assert "training.verl_tool.GuiActTool" in got["tools"]
        else:
            assert Path(got["pile"]).name == "data.parquet" and set(got["splits"]) == {"train"}
            assert ("messages" if kind == "sft-trl" else "text") in got["columns"]
        row = [r for r in lake.read("training_runs").to_pylist() if r["stage"] == stage][0]
        table = "ct" if stage == "ct" else "sft"
        assert json.loads(row["config"])["export"] == kind and row["pile_version"] == lake.version(table)
