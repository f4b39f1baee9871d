"""Arrow schemas of every lake table: explicit types, never inferred.

Each table has a name, a schema, a primary key (used for idempotent appends) and a schema version. Bump
SCHEMA_VERSION of a table when its schema changes and add a migration in storage/migrations.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

PROPOSAL = pa.struct(
    [
        pa.field("thought", pa.string()),
        pa.field("action", pa.string()),
        pa.field("model_version", pa.string()),
        pa.field("score", pa.float64()),
    ]
)

#: One step of an episode. Times are seconds from the episode start. Coordinates are screenshot pixels.
STEP = pa.struct(
    [
        pa.field("index", pa.int32(), nullable=False),
        pa.field("t_start", pa.float64()),
        pa.field("t_end", pa.float64()),
        pa.field("thought", pa.string()),  # cleaned thought ("" when none)
        pa.field("raw_thought", pa.string()),  # before cleanup (ASR text, model text)
        pa.field("thought_flag", pa.string()),  # e.g. "no_speech", "hallucination", "llm_rejected"; null when fine
        pa.field("action", pa.string()),  # the action grammar string, verbatim
        pa.field("action_type", pa.string()),  # parsed kind, null when unreadable
        pa.field("x", pa.int32()),
        pa.field("y", pa.int32()),
        pa.field("x2", pa.int32()),
        pa.field("y2", pa.int32()),
        pa.field("text", pa.string()),
        pa.field("key", pa.string()),
        pa.field("direction", pa.string()),
        pa.field("observation", pa.string()),  # compact text form of the screen (a11y-like), may be null
        pa.field("screenshot_uri", pa.string()),  # the object's lake-relative key, objects/ab/<sha256>.png
        pa.field("screenshot_sha256", pa.string()),
        pa.field("proposals", pa.list_(PROPOSAL)),  # interactive annotation: the model's candidates
        pa.field("decision", pa.string()),  # accepted | overridden | null
        pa.field("accepted_index", pa.int32()),
        pa.field("decided_by", pa.string()),
        pa.field("logprob_sum", pa.float64()),
        pa.field("token_logprobs", pa.list_(pa.float32())),
        pa.field("reward", pa.float64()),
    ]
)

_EPISODE_FIELDS = [
    pa.field("episode_id", pa.string(), nullable=False),  # content hash
    pa.field("session_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),  # think_aloud | interactive | rollout
    pa.field("round", pa.int32(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("task_family", pa.string()),
    pa.field("difficulty", pa.int32()),
    pa.field("instruction", pa.string(), nullable=False),
    pa.field("app", pa.string()),
    pa.field("platform", pa.string()),
    pa.field("screen_width", pa.int32()),
    pa.field("screen_height", pa.int32()),
    pa.field("annotator", pa.string()),  # salted pseudonym, never the raw id
    pa.field("group", pa.string()),  # expert | novice | model
    pa.field("policy_version", pa.string()),  # model that acted or proposed
    pa.field("group_id", pa.string()),  # rejection sampling: attempts of one task share it
    pa.field("attempt", pa.int32()),
    pa.field("reference_answer", pa.string()),
    pa.field("final_answer", pa.string()),  # content of finished(...), if any
    pa.field("outcome", pa.string()),  # finished | step_limit | unreadable_action | ended | unknown
    pa.field("env_reward", pa.float64()),
    pa.field("env_passed", pa.bool_()),
    pa.field("n_steps", pa.int32(), nullable=False),
    pa.field("steps", pa.list_(STEP), nullable=False),
    pa.field("pipeline_version", pa.string(), nullable=False),
    pa.field("ingested_at", TS, nullable=False),
    pa.field("meta", pa.string()),  # JSON: source-specific extras
]

EPISODES = pa.schema(_EPISODE_FIELDS)

#: The piles are thin (schema version 2): membership and routing columns plus the small flat episode columns that
#: pile queries group and filter on (round, source, task, family, difficulty), never the steps. The full episode is
#: the row of `episodes` with the same episode_id (storage.piles.read_pile, and the `sft` / `ct` DuckDB views, join
#: them): routing writes a few bytes per episode instead of copying every step, and an episode's content lives in
#: one place. `content_key` is the exact-dedup key of the episode under `content_key_version` (the ExactDedup version
#: that computed it), so the dedup index of the piles is read from the piles themselves; null when routed without it.
#: PILE_EPISODE_COLUMNS: the columns a pile row shares with its episode (same name, same value).
PILE_EPISODE_COLUMNS = ("episode_id", "round", "source", "task_id", "task_family", "difficulty")
_PILE_FIELDS = [f for f in _EPISODE_FIELDS if f.name in PILE_EPISODE_COLUMNS] + [
    pa.field("round_routed", pa.int32(), nullable=False),
    pa.field("content_key", pa.string()),
    pa.field("content_key_version", pa.string()),
]
SFT = pa.schema(_PILE_FIELDS)
CT = pa.schema(_PILE_FIELDS + [pa.field("reasons", pa.list_(pa.string()), nullable=False)])

SESSIONS = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("annotator", pa.string()),
        pa.field("group", pa.string()),
        pa.field("status", pa.string(), nullable=False),  # landed | quarantined
        pa.field("landed_uri", pa.string()),
        pa.field("content_sha256", pa.string()),
        pa.field("round", pa.int32()),
        pa.field("n_episodes", pa.int32()),
        pa.field("n_actions", pa.int32()),
        pa.field("duration_s", pa.float64()),
        pa.field("thought_share", pa.float64()),
        pa.field("speech_s", pa.float64()),
        pa.field("asr_model", pa.string()),
        pa.field("asr_confidence", pa.float64()),
        pa.field("unaligned_speech_s", pa.float64()),
        pa.field("asr_language", pa.string()),  # v2: the language with the most speech seconds
        pa.field("asr_language_prob", pa.float64()),  # v2: its identified probability (None: not identified)
        pa.field("cleanup_rejections", pa.int32()),  # v2: steps whose LLM cleanup the guard rejected
        pa.field("override_rate", pa.float64()),
        pa.field("problems", pa.list_(pa.string())),
        pa.field("pipeline_version", pa.string()),
        pa.field("ingested_at", TS, nullable=False),
    ]
)

VERDICTS = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("round", pa.int32(), nullable=False),
        pa.field("validator", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("passed", pa.bool_(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),  # fixed reason code per validator; "ok" on pass
        pa.field("score", pa.float64()),
        pa.field("details", pa.string()),
        pa.field("validated_at", TS, nullable=False),
    ]
)

QUARANTINE = pa.schema(
    [
        pa.field("quarantine_id", pa.string(), nullable=False),  # hash of (source, landed_uri, locator, error_type)
        pa.field("source", pa.string(), nullable=False),
        pa.field("landed_uri", pa.string(), nullable=False),
        pa.field("locator", pa.string()),  # e.g. "line 1234", a file inside a bundle
        pa.field("error_type", pa.string(), nullable=False),
        pa.field("error", pa.string(), nullable=False),
        pa.field("round", pa.int32()),
        pa.field("pipeline_version", pa.string()),
        pa.field("quarantined_at", TS, nullable=False),
    ]
)

ROUNDS = pa.schema(
    [
        pa.field("round", pa.int32(), nullable=False),
        pa.field("n_new", pa.int64()),
        pa.field("n_pass", pa.int64()),
        pa.field("n_fail", pa.int64()),
        pa.field("pass_rate", pa.float64()),
        pa.field("pass_rate_lo", pa.float64()),
        pa.field("pass_rate_hi", pa.float64()),
        pa.field("eval_n", pa.int64()),
        pa.field("eval_pass_rate", pa.float64()),
        pa.field("eval_pass_rate_lo", pa.float64()),
        pa.field("eval_pass_rate_hi", pa.float64()),
        pa.field("sft_size", pa.int64()),
        pa.field("ct_size", pa.int64()),
        pa.field("policy_version", pa.string()),
        pa.field("stage_status", pa.string()),  # JSON: stage -> {status, started_at, finished_at, seconds}
        pa.field("breakdown", pa.string()),  # JSON: per source / family / level pass rates and eval rates
        pa.field("updated_at", TS, nullable=False),
    ]
)

TRAINING_RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("round", pa.int32(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),  # ct | sft | rl
        pa.field("backend", pa.string()),
        pa.field("base_checkpoint", pa.string()),
        pa.field("output_checkpoint", pa.string()),
        pa.field("pile_version", pa.int64()),
        pa.field("samples", pa.int64()),
        pa.field("tokens", pa.int64()),
        pa.field("steps", pa.int64()),
        pa.field("loss_first", pa.float64()),
        pa.field("loss_last", pa.float64()),
        pa.field("losses", pa.list_(pa.float64())),
        pa.field("metrics", pa.string()),  # JSON
        pa.field("config", pa.string()),  # JSON
        pa.field("wall_s", pa.float64()),
        pa.field("started_at", TS, nullable=False),
    ]
)

AUDITS = pa.schema(
    [
        pa.field("audit_id", pa.string(), nullable=False),
        pa.field("round", pa.int32(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("seed", pa.int64()),
        pa.field("auditor", pa.string(), nullable=False),
        pa.field("verdict", pa.string(), nullable=False),  # good | bad
        pa.field("note", pa.string()),
        pa.field("recorded_at", TS, nullable=False),
    ]
)

PREFERENCE_PAIRS = pa.schema(
    [
        pa.field("pair_id", pa.string(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("step_index", pa.int32(), nullable=False),
        pa.field("round", pa.int32(), nullable=False),
        pa.field("instruction", pa.string()),
        pa.field("prompt", pa.string(), nullable=False),  # the state: instruction, history, observation
        pa.field("chosen", pa.string(), nullable=False),  # "Thought: ...\nAction: ..."
        pa.field("rejected", pa.string(), nullable=False),
        pa.field("model_version", pa.string()),
        pa.field("annotator", pa.string()),
    ]
)

DQ_RESULTS = pa.schema(
    [
        pa.field("result_id", pa.string(), nullable=False),
        pa.field("round", pa.int32(), nullable=False),
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("suite", pa.string(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("n_expectations", pa.int32()),
        pa.field("n_failed", pa.int32()),
        pa.field("overridden", pa.bool_()),
        pa.field("details", pa.string()),  # JSON of the GX result
        pa.field("validated_at", TS, nullable=False),
    ]
)


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: pa.Schema
    key: tuple[str, ...]
    version: int = 1
    partition_by: tuple[str, ...] = ()
    doc: str = ""
    #: Columns the key determines (every row with a given key has the same values there). An append then looks for
    #: existing keys only among rows with the batch's values of these columns, so Delta's file statistics skip every
    #: other file instead of reading the whole key column. Only for tables whose writers guarantee it.
    key_scope: tuple[str, ...] = ()
    #: Keep a key index beside each data file (storage/keyindex.py), so an append looks its batch up there instead
    #: of reading the key column of every file: for large tables without a key_scope.
    indexed: bool = False


TABLES: dict[str, TableSpec] = {
    t.name: t
    for t in [
        TableSpec("sessions", SESSIONS, ("session_id",), version=2, doc="one row per uploaded bundle or file"),
        # v2 (episodes, training_runs, rounds): object references are lake-relative keys (storage/refs.py migrates v1)
        TableSpec("episodes", EPISODES, ("episode_id",), version=2, doc="one row per trajectory", indexed=True),
        # verdicts, sft, ct: routing only ever judges and routes an episode in its own round (episodes.round)
        TableSpec(
            "verdicts",
            VERDICTS,
            ("episode_id", "validator", "version"),
            doc="one row per (episode, validator)",
            key_scope=("round",),
        ),  # fmt: skip
        TableSpec(
            "sft",
            SFT,
            ("episode_id",),
            version=2,
            doc="passed episodes (thin rows; full episode in episodes): the SFT pile",
            key_scope=("round",),
        ),  # fmt: skip
        TableSpec(
            "ct",
            CT,
            ("episode_id",),
            version=2,
            doc="failed episodes with reasons (thin rows; full episode in episodes): the CT pile",
            key_scope=("round",),
        ),  # fmt: skip
        TableSpec("quarantine", QUARANTINE, ("quarantine_id",), doc="inputs that could not become episodes"),
        TableSpec("rounds", ROUNDS, ("round",), version=2, doc="one row per flywheel round (upserted)"),
        TableSpec("training_runs", TRAINING_RUNS, ("run_id",), version=2, doc="one row per training job"),
        TableSpec("audits", AUDITS, ("audit_id",), doc="one row per audited episode verdict (append-only)"),
        TableSpec("preference_pairs", PREFERENCE_PAIRS, ("pair_id",), doc="overrides as (prompt, chosen, rejected)"),
        TableSpec("dq_results", DQ_RESULTS, ("result_id",), doc="Great Expectations suite results per batch"),
    ]
}


def spec(name: str) -> TableSpec:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; tables: {', '.join(TABLES)}") from None
