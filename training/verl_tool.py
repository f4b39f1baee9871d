"""verl tool `gui_act`: verl's tool agent loop plays a flywheel task, one action per call, in the sandbox.

Rows of `flywheel export sft-verl` name this tool in `extra_info.tools_kwargs` (its create_kwargs carry the task's
ground truth, training/verl_reward.py) and set `agent_name: tool_agent`. The tool config for verl
(`actor_rollout_ref.rollout.multi_turn.tool_config_path`):

    tools:
      - class_name: training.verl_tool.GuiActTool
        config: {type: native}

verl 0.9 creates and releases a tool instance around every call, so the environment of a trajectory lives in the
trajectory's `agent_data.extra_fields` (verl's place for tool session state), not in the instance. Each call
returns the next screen as text and as an image; the step reward is the environment's (+1 when a finished episode
passes). The final reward is compute_score's, which replays the same actions. Needs verl installed (it subclasses
verl's BaseTool); nothing else in flywheel imports this module.
"""

from __future__ import annotations

import io
import json
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

NAME = "gui_act"
SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": "Perform one GUI action on the current screen and get the next screen.",
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "description": "One action, e.g. click(point='<point>120 88</point>')"}
            },
            "required": ["action"],
        },
    },
}
_ENV = "flywheel_env"


class GuiActTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SCHEMA))
        self._truth: dict[str, str] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        iid = instance_id or uuid4().hex
        self._truth[iid] = (kwargs.get("create_kwargs") or {}).get("ground_truth") or ""
        return iid, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        agent_data = kwargs.get("agent_data")
        state = agent_data.extra_fields if agent_data is not None else {}
        env = state.get(_ENV) or new_env(self._truth.get(instance_id, ""))
        state[_ENV] = env
        r = env.step(str(parameters.get("action", "")))
        text = r.observation.text
        if r.done:
            text += f"\n[episode over: {'passed' if r.info.get('passed') else 'failed'} ({r.info.get('reason')})]"
        return ToolResponse(text=text, image=[_image(env)]), float(r.reward), {"done": r.done}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._truth.pop(instance_id, None)


def new_env(ground_truth: str):  # noqa: ANN201 - sandbox.env.Env
    """The sandbox environment of a verl row's ground truth (ValueError, one line, for a task it cannot play)."""
    from sandbox.env import Env
    from sandbox.tasks import Task

    truth = json.loads(ground_truth or "{}")
    if truth.get("verifier") != "sandbox" or not truth.get("task"):
        raise ValueError(
            f"{NAME} plays sandbox tasks only; task {truth.get('task_id')!r} has verifier {truth.get('verifier')!r}"
        )
    return Env(Task.from_dict(truth["task"]), screenshots=True)


def _image(env: Any) -> Any:
    from PIL import Image

    png = env.observation().screenshot or env.screenshot()
    return Image.open(io.BytesIO(png)).convert("RGB")
