"""Training backends: the built-in jobs, or an external command (a TRL / verl launch on a GPU cluster).

An external backend gets the stage's pile exported at a recorded Delta version as prompt/completion JSONL (TRL's
prompt-completion format; the same prompts the built-in jobs train on), the base checkpoint as a local
save_pretrained folder, and an output folder. Whatever save_pretrained folder it leaves there is published to the
object store and recorded in training_runs exactly like a built-in job's checkpoint.

The template is formatted with {pile}, {base}, {out}, {stage}, {round} and split like a shell line (no shell is
involved), e.g.

    trl sft --model_name_or_path {base} --dataset_name {pile} --output_dir {out}
    python -m verl.trainer.main_ppo data.train_files={pile} actor_rollout_ref.model.path={base} ...
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.prompt import PromptConfig
from training.checkpoints import fetch, publish_folder, version_of
from training.data import pile_examples, read_pile
from training.model import Policy
from training.runs import JobResult, record_run

#: The pile each stage trains on (RL's prompts come from the SFT pile when it runs outside).
STAGE_PILE = {"ct": "ct", "sft": "sft", "rl": "sft"}


#: How much of a trainer's stderr its training_runs row keeps (a traceback and the log lines before it).
STDERR_TAIL = 16_000


def export_pile(
    lake,  # noqa: ANN001
    stage: str,
    path: Path,
    version: int | None = None,
    prompt_cfg: PromptConfig = PromptConfig(),
) -> tuple[int, int]:
    """Write the stage's pile as {"prompt", "completion"} JSONL; returns (Delta version, rows written)."""
    pile = read_pile(lake, STAGE_PILE[stage], version)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for prompt, answer in pile_examples(pile.rows, prompt_cfg):
            f.write(json.dumps({"prompt": prompt, "completion": answer}, ensure_ascii=False) + "\n")
            n += 1
    return pile.version, n


@dataclass(frozen=True)
class CommandBackend:
    """Run `template` as a subprocess; its output folder becomes the stage's checkpoint."""

    template: str
    timeout_s: float = 24 * 3600

    @property
    def name(self) -> str:
        argv = shlex.split(self.template)
        return "command:" + (Path(argv[0]).name if argv else "?")

    def run(
        self,
        lake,  # noqa: ANN001
        stage: str,
        round: int,
        base: str | Policy | None,
        prompt_cfg: PromptConfig = PromptConfig(),
    ) -> tuple[JobResult, Policy]:
        if stage not in STAGE_PILE:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGE_PILE)}")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"flywheel-{stage}-") as d:
            work = Path(d)
            pile_path = work / f"{stage}.jsonl"
            version, n = export_pile(lake, stage, pile_path, prompt_cfg=prompt_cfg)
            base_dir, base_uri = work / "base", None
            if isinstance(base, Policy):
                base.save(base_dir)
                base_uri = base.uri
            elif base is not None:
                fetch(lake, base).save(base_dir)
                base_uri = base
            out = work / "out"
            out.mkdir()
            fields = {
                "pile": str(pile_path),
                "base": str(base_dir),
                "out": str(out),
                "stage": stage,
                "round": str(round),
            }
            argv = [a.format(**fields) for a in shlex.split(self.template)]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
            except FileNotFoundError:
                raise ValueError(f"training command not found: {argv[0]!r}") from None
            except subprocess.TimeoutExpired:
                raise ValueError(f"training command timed out after {self.timeout_s:.0f} s: {argv[0]}") from None
            if proc.returncode != 0:  # the whole tail is kept in a training_runs row; the error is one line
                failed = JobResult(stage, round, base_uri, backend=self.name, pile_version=version, samples=n,
                                   config={"template": self.template, "argv": argv},
                                   metrics={"failed": True, "returncode": proc.returncode, "stderr_tail": proc.stderr[-STDERR_TAIL:],
                                            "stdout_tail": proc.stdout[-2000:]})  # fmt: skip
                failed.wall_s = time.perf_counter() - t0
                run_id = record_run(lake, failed)
                last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
                raise ValueError(f"training command exited with {proc.returncode}: {last[0][:300]} (the stderr tail is in "
                                 f"training_runs, run {run_id})")  # fmt: skip
            uri = publish_folder(lake, out)  # refuses a folder without config.json
            res = JobResult(
                stage,
                round,
                base_uri,
                output_checkpoint=uri,
                backend=self.name,
                pile_version=version,
                samples=n,
                config={"template": self.template, "argv": argv},
                metrics={"stdout_tail": proc.stdout[-2000:], "stderr_tail": proc.stderr[-STDERR_TAIL:]},
            )
            res.wall_s = time.perf_counter() - t0
            record_run(lake, res)
            return res, fetch(lake, uri)


def backend_name(spec: str | None) -> str:
    return "builtin" if not spec or spec == "builtin" else CommandBackend(spec).name


__all__ = ["CommandBackend", "export_pile", "backend_name", "version_of"]
