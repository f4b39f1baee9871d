"""The verl export against verl itself (verl 0.9.1 from PyPI, installed without its training stack): RLHFDataset
loads train.parquet and validation.parquet with a VLM processor, the shipped reward function (training/verl_reward.py)
scores a passing episode 1 and a failing one 0 through the sandbox's own verifier, and the shipped gui_act tool
(training/verl_tool.py) plays a row's task from its tools_kwargs the way verl's tool agent loop calls it."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from training.exports import export
from training.verl_reward import actions_in, compute_score, ground_truth

pytest.importorskip("verl", reason="verl is installed from requirements.lock (--no-deps)")


def _response(actions: list[str], tool_calls: bool = False) -> str:
    """What a policy's rollout decodes to: Thought/Action turns, or gui_act tool calls (hermes format)."""
    if tool_calls:
        return "\n".join(
            f"Thought: next\n<tool_call>\n{json.dumps({'name': 'gui_act', 'arguments': {'action': a}})}\n</tool_call>"
            for a in actions
        )
    return "\n".join(f"Thought: step {i}\nAction: {a}\n<|im_end|>\nObservation: ..." for i, a in enumerate(actions))


@pytest.fixture(scope="module")
def sandbox_lake(tmp_path_factory: pytest.TempPathFactory):
    """Expert and novice attempts at sandbox tasks with their screenshots, routed by the real validators: the
    experts' passes in the SFT pile, at least one novice failure in CT."""
    from sandbox.demonstrators import Expert, Novice
    from sandbox.heldout import training_tasks
    from sandbox.rollout import run_attempt, to_episode
    from schemas.records import episodes_to_table
    from storage import Lake
    from validators.routing import route_round

    lake = Lake.open(tmp_path_factory.mktemp("verl") / "lake", create=True)

    def ref(png: bytes) -> tuple[str, str]:
        return lake.objects.put_object(png, ".png"), hashlib.sha256(png).hexdigest()

    eps, failed = [], []
    for t in training_tasks(6, seed=41, levels=(3, 4)):
        eps.append(to_episode(run_attempt(t, Expert(), screenshots=True), "rollout", f"x-{t.task_id}", 1, ref))
        for k in range(4):
            a = run_attempt(t, Novice(seed=k), screenshots=True)
            if not a.passed:
                eps.append(to_episode(a, "rollout", f"n-{t.task_id}-{k}", 1, ref))
                failed.append((t.task_id, [s.action for s in a.steps]))
                break
    assert failed, "the novice never failed: pick other tasks"
    lake.append("episodes", episodes_to_table(eps))
    route_round(lake, 1)
    return lake, failed


@pytest.fixture(scope="module")
def verl_export(sandbox_lake, tmp_path_factory: pytest.TempPathFactory):
    lake, failed = sandbox_lake
    return export(lake, "sft-verl", tmp_path_factory.mktemp("verl-export"), val_fraction=0.2), failed


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.tiny_vlm import build_tiny_vlm
    from training.exports import SYSTEM_PROMPT

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm"), [SYSTEM_PROMPT, "Instruction: click the OK button"] * 20)


def test_rlhf_dataset_loads_both_splits_with_a_vlm_processor(verl_export, vlm_dir: Path, tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from transformers import AutoProcessor
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    res, _ = verl_export
    processor = AutoProcessor.from_pretrained(vlm_dir)
    # filter_overlong_prompts measures prompts with qwen_vl_utils, which needs torchvision (not loadable here); the
    # agent loop's own path (raw_prompt -> chat template -> processor) is exercised below instead
    cfg = OmegaConf.create({"prompt_key": "prompt", "image_key": "images", "max_prompt_length": 8192,
                            "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")})  # fmt: skip
    seen = 0
    for split, path in res.files.items():
        ds = RLHFDataset([str(path)], processor.tokenizer, cfg, processor)
        assert len(ds) == res.split_rows[split] > 0
        for i in range(len(ds)):
            item = ds[i]
            seen += 1
            assert item["extra_info"]["split"] == split and item["agent_name"] == "tool_agent"
            assert (
                item["tools_kwargs"] == item["extra_info"]["tools_kwargs"]
                and item["index"] == item["extra_info"]["index"]
            )
            user = item["raw_prompt"][1]["content"]
            assert user[0]["type"] == "image" and user[0]["image"].size == (640, 400) and user[1]["type"] == "text"
            assert json.loads(item["reward_model"]["ground_truth"])["verifier"] == "sandbox"
        batch = collate_fn([ds[0], ds[len(ds) - 1]])
        assert len(batch["raw_prompt"]) == 2 and batch["dummy_tensor"].shape == (2, 1)
        # what verl's agent loop does with raw_prompt: the chat template, then the processor with the images
        msgs = ds[0]["raw_prompt"]
        text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        out = processor(text=[text], images=[msgs[1]["content"][0]["image"]], return_tensors="pt")
        assert out["pixel_values"].shape == (1, 3, 56, 56)
        assert int((out["input_ids"] == processor.tokenizer.convert_tokens_to_ids("<image>")).sum()) == 16
    assert seen == res.rows


def test_the_reward_function_scores_passing_and_failing_episodes_1_and_0(verl_export) -> None:
    import pyarrow.parquet as pq

    res, failed = verl_export
    rows = pq.read_table(res.files["train"]).to_pylist() + pq.read_table(res.files["validation"]).to_pylist()
    by_task = {r["extra_info"]["task_id"]: r for r in rows}
    for r in rows:
        truth = r["reward_model"]["ground_truth"]
        recorded = [t["action"] for t in r["extra_info"]["turns"]]
        assert compute_score(r["data_source"], _response(recorded), truth, r["extra_info"]) == 1.0
        assert compute_score(r["data_source"], _response(recorded, tool_calls=True), truth) == 1.0
        assert compute_score(r["data_source"], _response(recorded[:-1]), truth) == 0.0  # stopped one step short
        assert compute_score(r["data_source"], "I cannot do this.", truth) == 0.0
    scored = 0
    for task_id, actions in failed:  # the novices' failed episodes of the same tasks
        if task_id in by_task:
            r = by_task[task_id]
            assert compute_score(r["data_source"], _response(actions), r["reward_model"]["ground_truth"]) == 0.0
            scored += 1
    assert scored >= 1


def test_reference_answer_tasks_use_the_validator_and_unverifiable_ones_are_refused() -> None:
    truth = json.dumps(ground_truth({"task_id": "web/42", "platform": "web", "instruction": "What is the total?",
                                     "reference_answer": "Total: 1234.", "steps": []}))  # fmt: skip
    assert json.loads(truth)["verifier"] == "reference_answer"
    assert compute_score("flywheel/web", "Action: finished(content='total 1234')", truth) == 1.0  # normalised match
    assert compute_score("flywheel/web", "Action: finished(content='999')", truth) == 0.0
    assert compute_score("flywheel/web", "Action: click(point='<point>1 2</point>')", truth) == 0.0
    none = json.dumps(ground_truth({"task_id": "web/7", "platform": "web", "instruction": "Book a table", "steps": []}))
    with pytest.raises(ValueError, match="no verifier outside its environment") as e:
        compute_score("flywheel/web", "Action: finished(content='ok')", none)
    assert "\n" not in str(e.value)
    assert actions_in('Action: wait()\n{"action": "finished(content=\\"a\\")"}') == ["wait()", 'finished(content="a")']


def test_the_gui_act_tool_plays_a_row_like_the_tool_agent_loop(verl_export) -> None:
    from types import SimpleNamespace

    import pyarrow.parquet as pq

    from training.verl_tool import GuiActTool

    res, _ = verl_export
    row = pq.read_table(res.files["train"]).to_pylist()[0]
    kwargs = row["extra_info"]["tools_kwargs"]["gui_act"]
    tool = GuiActTool({"type": "native"})
    # the trajectory's state holder: verl's AgentData.extra_fields. AgentData itself is not imported: its module
    # imports hydra, which needs antlr4 4.9 while the lock pins 4.13 (moto's); the tool uses only this attribute
    agent = SimpleNamespace(extra_fields={})

    async def play(actions: list[str]) -> list[tuple]:
        out = []
        for a in actions:  # verl 0.9: create, execute, release around every call
            iid, _ = await tool.create(create_kwargs=kwargs["create_kwargs"])
            out.append(await tool.execute(iid, {"action": a}, agent_data=agent))
            await tool.release(iid)
        return out

    steps = asyncio.run(play([t["action"] for t in row["extra_info"]["turns"]]))
    (last, reward, info) = steps[-1]
    assert info["done"] and reward == 1.0 and "episode over: passed" in last.text
    assert all(not s[2]["done"] for s in steps[:-1]) and last.image[0].size == (640, 400)
    assert tool.tool_schema.function.name == "gui_act"
