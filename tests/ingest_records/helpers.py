"""Builders for rollout lines used by several tests (plain dicts, written as JSONL by the test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def attempt(i: int, n_steps: int = 3, **over: Any) -> dict[str, Any]:
    steps = [
        {
            "thought": f"step {k} of {i}",
            "action": f"click(point='<point>{10 + k} {20 + i % 50}</point>')",
            "logprob_sum": -1.5,
            "token_logprobs": [-1.0, -0.5],
        }
        for k in range(n_steps - 1)
    ] + [{"thought": "done", "action": "finished(content='ok')", "token_logprobs": [-0.25, -0.5]}]
    d = {
        "task_id": f"t{i // 2}",
        "group_id": f"g{i // 2}",
        "attempt": i % 2,
        "policy_version": "ckpt-1",
        "instruction": f"do {i // 2}",
        "steps": steps,
        "reward": 1.0,
        "passed": True,
        "termination": "finished",
    }
    d.update(over)
    return d


def write_lines(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for ln in lines:
            f.write(ln if isinstance(ln, str) else json.dumps(ln))
            f.write("\n")
    return path
