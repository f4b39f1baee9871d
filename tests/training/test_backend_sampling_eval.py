"""The external-command backend, rejection sampling through the rollout ingestion path, and evaluation rows."""

from __future__ import annotations

import json
import sys

import pyarrow.compute as pc
import pytest
import torch

from tests.training.fakes import tasks
from tests.training.test_jobs import _pile, _weights
from training.backend import CommandBackend
from training.checkpoints import fetch, publish
from training.config import EvalConfig, SamplingConfig
from training.evaluate import evaluate, record_eval
from training.sampling import rejection_sample

#: A stand-in external trainer: reads the exported pile (sft-trl Parquet: messages and images) and the base folder,
#: writes a changed checkpoint.
TRAINER = (
    "import sys,torch,pyarrow.parquet as pq;"
    "from transformers import AutoModelForCausalLM, AutoTokenizer;"
    "pile,base,out=sys.argv[1:4];"
    "rows=pq.read_table(pile).to_pylist();"
    "assert rows and all(r['messages'][0]['role']=='system' and r['messages'][-1]['role']=='assistant' for r in rows);"
    "m=AutoModelForCausalLM.from_pretrained(base);"
    "torch.nn.init.normal_(m.get_output_embeddings().weight);"
    "m.save_pretrained(out);AutoTokenizer.from_pretrained(base).save_pretrained(out);"
    "print('trained on',len(rows))"
)


def test_command_backend_records_its_checkpoint_like_a_builtin_job(lake, tiny_policy, tmp_path) -> None:
    _pile(lake, "sft", 6)
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.replace(";", "\n"))
    base = publish(lake, tiny_policy)
    be = CommandBackend(f"{sys.executable} {script} {{pile}} {{base}} {{out}}")
    res, pol = be.run(lake, "sft", 2, base)
    row = lake.read("training_runs").to_pylist()[0]
    assert (
        row["backend"] == be.name
        and row["base_checkpoint"] == base
        and row["output_checkpoint"] == res.output_checkpoint
    )
    assert row["pile_version"] == lake.version("sft") and row["samples"] == 6
    assert json.loads(row["config"])["export"] == "sft-trl"
    assert "trained on 6" in json.loads(row["metrics"])["stdout_tail"]
    assert not torch.equal(_weights(fetch(lake, base).model), _weights(pol.model))


def test_command_backend_errors_are_one_line(lake, tiny_policy, tmp_path) -> None:
    _pile(lake, "sft", 2)
    noisy = "import sys; sys.stderr.write(''.join('log line %d\\n' % i for i in range(300))); sys.exit(3)"
    with pytest.raises(ValueError, match="exited with 3: log line 299 .the stderr tail is in training_runs") as e:
        CommandBackend(f'{sys.executable} -c "{noisy}"').run(lake, "sft", 1, tiny_policy)
    assert "\n" not in str(e.value)  # one line
    with pytest.raises(ValueError, match="not a model folder"):
        CommandBackend(f"{sys.executable} -c pass").run(lake, "sft", 1, tiny_policy)
    with pytest.raises(ValueError, match="not found"):
        CommandBackend("no-such-trainer-binary {pile}").run(lake, "sft", 1, tiny_policy)
    rows = lake.read("training_runs").to_pylist()  # only the failed run is recorded, with its whole stderr tail
    assert len(rows) == 1 and rows[0]["output_checkpoint"] is None
    m = json.loads(rows[0]["metrics"])
    assert m["failed"] and m["returncode"] == 3 and m["stderr_tail"].count("log line") == 300


def test_rejection_sampling_lands_through_the_rollout_reader(lake, tiny_policy, tmp_path) -> None:
    tiny_policy.version = "ckpt-test"
    res = rejection_sample(lake, 3, tiny_policy, tasks(5, 7), tmp_path, SamplingConfig(attempts=3, max_new_tokens=24))
    assert res.attempts == 15 and res.episodes_added == 15
    eps = lake.read("episodes").to_pylist()
    assert {e["source"] for e in eps} == {"rollout"} and {e["round"] for e in eps} == {3}
    assert {e["policy_version"] for e in eps} == {"ckpt-test"}
    assert len({e["group_id"] for e in eps}) == 5 and sorted({e["attempt"] for e in eps}) == [0, 1, 2]
    for e in eps:
        for s in e["steps"]:
            assert s["token_logprobs"] and s["logprob_sum"] == pytest.approx(sum(s["token_logprobs"]), abs=1e-3)
    again = rejection_sample(lake, 3, tiny_policy, tasks(5, 7), tmp_path, SamplingConfig(attempts=3, max_new_tokens=24))
    assert again.episodes_added == 0  # same seed, same attempts: idempotent


def test_evaluation_writes_rates_intervals_and_levels(lake, tiny_policy) -> None:
    ts = tasks(6, 11, 1) + tasks(6, 12, 2)
    res = evaluate(tiny_policy, ts, EvalConfig(max_new_tokens=24))
    assert res.overall.n == 12 and set(res.by_level) == {1, 2} and res.by_level[1].n == 6
    assert 0.0 <= res.overall.lo <= res.overall.rate <= res.overall.hi <= 1.0
    record_eval(lake, 4, res)
    row = lake.read("rounds", filter=pc.field("round") == 4).to_pylist()[0]
    assert row["eval_n"] == 12 and row["eval_pass_rate"] == res.overall.rate
    assert row["eval_pass_rate_lo"] < row["eval_pass_rate_hi"]
    assert set(json.loads(row["breakdown"])["eval"]["by_level"]) == {"1", "2"}
