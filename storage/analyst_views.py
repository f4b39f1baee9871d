"""Convenience DuckDB views and column documentation for analysts, defined on a connection from storage.views.

`storage.views.connect` registers one view per Delta table; `define_analyst_views(con)` then adds views that
answer the common questions without writing UNNESTs and window functions every time (steps unnested from
episodes, verdict reasons, pass rates per round and source, pile growth, override rates per annotator, session
status, audited episodes), and writes every column's meaning into DuckDB's catalog with COMMENT ON, so
`SELECT * FROM lake_columns WHERE table_name = 'steps'` answers "what does this column mean" inside the shell.

Each view lists the tables it reads; a connection opened on a subset of tables gets only the views it can serve.
Polars users read the same Delta tables with `polars_storage_options` (polars wants lowercase aws_* keys).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas.tables import STEP, TABLES

if TYPE_CHECKING:
    import duckdb

    from storage.lake import Lake


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    needs: tuple[str, ...]
    sql: str
    columns: dict[str, str]


# ----------------------------------------------------------------------------------------- column docs (tables)
_EPISODE_COLS = {
    "episode_id": "content hash of the episode (source, session, task, instruction, attempt, actions, thoughts)",
    "session_id": "the uploaded bundle, annotation session or rollout batch the episode came from",
    "source": "think_aloud | interactive | rollout",
    "round": "flywheel round in which the episode was made",
    "task_id": "task identifier (sandbox task, or the bundle's task id)",
    "task_family": "task family, e.g. a MiniWoB task name; null when unknown",
    "difficulty": "task difficulty level; null when unknown",
    "instruction": "the natural-language task given to the agent or annotator (PII redacted)",
    "app": "application the task ran in",
    "platform": "desktop | web | phone ...",
    "screen_width": "screenshot width in pixels (action coordinates are in this space)",
    "screen_height": "screenshot height in pixels",
    "annotator": "salted pseudonym of the annotator (never the raw id); null for model rollouts",
    "group": "expert | novice | model",
    "policy_version": "model that acted (rollouts) or proposed (interactive)",
    "group_id": "rejection sampling: attempts at one task share it",
    "attempt": "rejection sampling: attempt number within the group",
    "reference_answer": "expected final answer, when the task has one",
    "final_answer": "content of the episode's finished(...) action, if any",
    "outcome": "finished | step_limit | unreadable_action | ended | unknown",
    "env_reward": "the environment's reward for the episode (rollouts)",
    "env_passed": "the environment verifier's pass/fail (rollouts)",
    "n_steps": "number of steps",
    "steps": "list of step structs (see the steps view for one row per step)",
    "pipeline_version": "version of the code that wrote the row (lineage)",
    "ingested_at": "when the episode was written (UTC)",
    "meta": "JSON text with source-specific extras",
}
_PILE_COLS = {
    "round_routed": "round in which routing put the episode in this pile",
    "reasons": "failure reason codes (validator:reason) that sent the episode to CT",
}
_THIN_COLS = {
    **{c: _EPISODE_COLS[c] for c in ("episode_id", "round", "source", "task_id", "task_family", "difficulty")},
    "round_routed": _PILE_COLS["round_routed"],
    "content_key": "exact-dedup content key of the episode (validators/dedup.py); null when routed without exact dedup",
    "content_key_version": "version of the exact-dedup validator that computed content_key",
}
_STEP_COLS = {
    "index": "step number within the episode, from 0",
    "t_start": "step start, seconds from the episode start",
    "t_end": "step end, seconds from the episode start",
    "thought": "cleaned thought before the action (empty string when none)",
    "raw_thought": "thought before cleanup (ASR text, model text)",
    "thought_flag": "why the thought is suspect (no_speech, hallucination, llm_rejected, ...); null when fine",
    "action": "the action in the action grammar, verbatim",
    "action_type": "parsed action kind (click, type, ...); null when the action is unreadable",
    "x": "action x (screenshot pixels)",
    "y": "action y (screenshot pixels)",
    "x2": "drag end x",
    "y2": "drag end y",
    "text": "content of type/finished",
    "key": "hotkey keys, space separated",
    "direction": "scroll direction",
    "observation": "compact text form of the screen (a11y-like); may be null",
    "screenshot_uri": "object-store URI of the screenshot before the action",
    "screenshot_sha256": "SHA-256 of the screenshot bytes",
    "proposals": "interactive annotation: the model's candidate (thought, action) proposals",
    "decision": "interactive annotation: accepted | overridden | null",
    "accepted_index": "index of the accepted proposal",
    "decided_by": "who decided (annotator pseudonym)",
    "logprob_sum": "sum of the action tokens' log-probabilities (rollouts)",
    "token_logprobs": "per-token log-probabilities (rollouts)",
    "reward": "per-step reward, where the environment gives one",
}

TABLE_COLUMN_DOCS: dict[str, dict[str, str]] = {
    "episodes": _EPISODE_COLS,
    "sft": {**_EPISODE_COLS, "round_routed": _PILE_COLS["round_routed"]},
    "ct": {**_EPISODE_COLS, **_PILE_COLS},
    "sft_thin": _THIN_COLS,
    "ct_thin": {**_THIN_COLS, "reasons": _PILE_COLS["reasons"]},
    "sessions": {
        "session_id": "the bundle's session id (or the file's, for record sources)",
        "source": "think_aloud | interactive | rollout",
        "annotator": "salted pseudonym of the annotator",
        "group": "expert | novice | model",
        "status": "landed | quarantined",
        "landed_uri": "where the uploaded input lies in the landing area",
        "content_sha256": "SHA-256 of the uploaded input",
        "round": "round the session was ingested in",
        "n_episodes": "episodes made from the session",
        "n_actions": "actions (steps) in the session",
        "duration_s": "session length in seconds",
        "thought_share": "share of actions that have a thought (0-1)",
        "speech_s": "seconds of detected speech",
        "asr_model": "ASR model used, null when the bundle had a transcript",
        "asr_confidence": "mean ASR word probability (0-1), null without ASR",
        "unaligned_speech_s": "seconds of speech that no action took as its thought",
        "asr_language": "language with the most speech seconds (de, fr, ... speech never becomes thoughts unless configured)",
        "asr_language_prob": "its identified probability (0-1), null when the English model was sure throughout",
        "cleanup_rejections": "steps whose LLM cleanup the guard rejected (rules used instead)",
        "override_rate": "interactive sessions: share of steps where the annotator overrode the model",
        "problems": "problem codes found while ingesting (empty when none)",
        "pipeline_version": "version of the code that wrote the row",
        "ingested_at": "when the session was ingested (UTC)",
    },
    "verdicts": {
        "episode_id": "the judged episode",
        "round": "round of the routing that asked for the verdict",
        "validator": "validator name",
        "version": "validator version",
        "passed": "the verdict V: true = pass",
        "reason": "fixed reason code of the validator; 'ok' on pass",
        "score": "validator score, where it has one",
        "details": "JSON with the validator's details",
        "validated_at": "when the verdict was given (UTC)",
    },
    "quarantine": {
        "quarantine_id": "hash of (source, landed_uri, locator, error_type)",
        "source": "the source the input was meant for",
        "landed_uri": "the input that could not become an episode",
        "locator": "where inside the input (a line, a file in a bundle)",
        "error_type": "fixed error code (invalid_json, audio_undecodable, path_traversal, ...)",
        "error": "readable error message",
        "round": "round of the ingestion",
        "pipeline_version": "version of the code that wrote the row",
        "quarantined_at": "when the input was quarantined (UTC)",
    },
    "rounds": {
        "round": "flywheel round",
        "n_new": "new episodes routed this round",
        "n_pass": "of them, routed to SFT",
        "n_fail": "of them, routed to CT",
        "pass_rate": "n_pass / n_new: P(V=1 | round)",
        "pass_rate_lo": "lower end of the pass rate's 95% interval",
        "pass_rate_hi": "upper end of the pass rate's 95% interval",
        "eval_n": "held-out evaluation episodes",
        "eval_pass_rate": "held-out evaluation pass rate of the round's policy",
        "eval_pass_rate_lo": "lower end of the evaluation pass rate's 95% interval",
        "eval_pass_rate_hi": "upper end of the evaluation pass rate's 95% interval",
        "sft_size": "SFT pile size after the round",
        "ct_size": "CT pile size after the round",
        "policy_version": "policy checkpoint at the end of the round",
        "stage_status": "JSON: stage -> {status, started_at, finished_at, seconds}",
        "breakdown": "JSON: pass rates per source, family, level",
        "updated_at": "when the row was last updated (UTC)",
    },
    "training_runs": {
        "run_id": "training job id",
        "round": "round the job trained for",
        "stage": "ct | sft | rl | merge",
        "backend": "training backend",
        "base_checkpoint": "checkpoint the job started from",
        "output_checkpoint": "checkpoint the job wrote (object-store URI)",
        "pile_version": "Delta version of the pile it trained on",
        "samples": "training samples seen",
        "tokens": "tokens seen",
        "steps": "optimizer steps",
        "loss_first": "loss at the first step",
        "loss_last": "loss at the last step",
        "losses": "loss per step",
        "metrics": "JSON of metrics",
        "config": "JSON of the job configuration",
        "wall_s": "wall-clock seconds",
        "started_at": "when the job started (UTC)",
    },
    "audits": {
        "audit_id": "hash of (round, episode, seed, auditor, verdict, note): re-recording a sheet adds nothing",
        "round": "round of the audited SFT episode",
        "episode_id": "the audited episode",
        "seed": "seed of the sample the episode was drawn in",
        "auditor": "who audited",
        "verdict": "good | bad: is the passed episode truly a good demonstration",
        "note": "the auditor's note",
        "recorded_at": "when the verdict was recorded (UTC); later rows supersede earlier ones per auditor",
    },
    "preference_pairs": {
        "pair_id": "hash of the pair",
        "episode_id": "the interactive episode",
        "step_index": "the step where the annotator overrode the model",
        "round": "round of the episode",
        "instruction": "the task instruction",
        "prompt": "the state: instruction, history, observation",
        "chosen": "the annotator's 'Thought: ...\\nAction: ...'",
        "rejected": "the model's proposal",
        "model_version": "model that proposed the rejected step",
        "annotator": "annotator pseudonym",
    },
    "dq_results": {
        "result_id": "hash of the result",
        "round": "round of the batch",
        "batch_id": "the validated batch",
        "suite": "Great Expectations suite name",
        "success": "whether every expectation held",
        "n_expectations": "expectations in the suite",
        "n_failed": "expectations that failed",
        "overridden": "whether an operator let a failing batch through",
        "details": "JSON of the GX result",
        "validated_at": "when the suite ran (UTC)",
    },
}

TABLE_DOCS: dict[str, str] = {
    **{n: t.doc for n, t in TABLES.items()},
    "sft": "the SFT pile: every passed episode in full (sft_thin joined to episodes)",
    "ct": "the CT pile: every failed episode in full, with its reasons (ct_thin joined to episodes)",
    "sft_thin": "the SFT pile as stored: one thin row per passed episode (join episodes for the rest)",
    "ct_thin": "the CT pile as stored: one thin row per failed episode, with its reasons",
}
#: Every name a connection registers for the lake's tables, in catalog order (the piles: view, then stored rows).
REGISTERED = tuple(x for n in TABLES for x in ((n, f"{n}_thin") if n in ("sft", "ct") else (n,)))

# ---------------------------------------------------------------------------------------- convenience views
_STEP_SELECT = ",\n       ".join(
    f'u.step."{f.name}" AS "{"step_index" if f.name == "index" else f.name}"' for f in STEP
)

VIEWS: tuple[View, ...] = (
    View(
        "routed",
        "every routed episode once: the SFT and CT piles stacked, with passed = which pile",
        ("sft", "ct"),
        """
SELECT episode_id, session_id, source, round, round_routed, task_id, task_family, difficulty, annotator, "group",
       policy_version, n_steps, outcome, TRUE AS passed, 'sft' AS pile, []::VARCHAR[] AS reasons
FROM sft
UNION ALL
SELECT episode_id, session_id, source, round, round_routed, task_id, task_family, difficulty, annotator, "group",
       policy_version, n_steps, outcome, FALSE AS passed, 'ct' AS pile, reasons
FROM ct
""",
        {
            "passed": "true for the SFT pile, false for the CT pile",
            "pile": "sft | ct",
            "reasons": "failure reason codes (empty for SFT)",
        },
    ),
    View(
        "steps",
        "one row per step of every episode, with the episode's context and its pile (null until routed)",
        ("episodes", "sft", "ct"),
        f"""
WITH p AS (
  SELECT episode_id, max(pile) AS pile  -- 'sft' > 'ct': an episode in both (an invariant violation) reads as SFT
  FROM (SELECT episode_id, 'sft' AS pile FROM sft_thin UNION ALL SELECT episode_id, 'ct' AS pile FROM ct_thin)
  GROUP BY episode_id
), u AS (  -- the pile per episode, then unnest in the select list: a join after the unnest probes n_steps times as
          -- many rows, and a lateral UNNEST under a filter on pile becomes a slow delim join
  SELECT e.episode_id, e.session_id, e.source, e.round, e.task_id, e.task_family, e.instruction, e.annotator,
         e."group", e.policy_version, e.n_steps, p.pile, UNNEST(e.steps) AS step
  FROM episodes e LEFT JOIN p ON p.episode_id = e.episode_id
)
SELECT u.episode_id, u.session_id, u.source, u.round, u.task_id, u.task_family, u.instruction, u.annotator,
       u."group", u.policy_version, u.n_steps, u.pile,
       {_STEP_SELECT}
FROM u
""",
        {"pile": "sft | ct | null (not routed yet)", "step_index": _STEP_COLS["index"]},
    ),
    View(
        "verdict_reasons",
        "verdict counts per round, validator (with version), outcome and reason code",
        ("verdicts",),
        """
SELECT round, validator, version, passed, reason, count(*) AS n,
       count(*) / sum(count(*)) OVER (PARTITION BY round, validator, version) AS share
FROM verdicts
GROUP BY round, validator, version, passed, reason
""",
        {
            "n": "verdicts with this reason",
            "share": "share of the validator's verdicts in the round (0-1)",
        },
    ),
    View(
        "pass_rates",
        "routing pass rate per round and source ('all' = every source), from the piles",
        ("sft", "ct"),
        """
WITH r AS (
  SELECT round, source, TRUE AS passed FROM sft_thin
  UNION ALL
  SELECT round, source, FALSE AS passed FROM ct_thin
)
SELECT round, coalesce(source, 'all') AS source, count(*) AS n_routed,
       count(*) FILTER (WHERE passed) AS n_pass, count(*) FILTER (WHERE NOT passed) AS n_fail,
       (count(*) FILTER (WHERE passed))::DOUBLE / count(*) AS pass_rate
FROM r
GROUP BY GROUPING SETS ((round, source), (round))
""",
        {
            "source": "think_aloud | interactive | rollout | all",
            "n_routed": "episodes of the round in either pile",
            "n_pass": "of them in SFT",
            "n_fail": "of them in CT",
            "pass_rate": "n_pass / n_routed",
        },
    ),
    View(
        "pile_growth",
        "episodes added to each pile per routing round, and the pile sizes after it",
        ("sft", "ct"),
        """
WITH added AS (
  SELECT round_routed AS round, count(*) FILTER (WHERE pile = 'sft') AS sft_added,
         count(*) FILTER (WHERE pile = 'ct') AS ct_added
  FROM (SELECT round_routed, 'sft' AS pile FROM sft_thin UNION ALL SELECT round_routed, 'ct' AS pile FROM ct_thin)
  GROUP BY round_routed
)
SELECT round, sft_added, ct_added,
       (sum(sft_added) OVER (ORDER BY round))::BIGINT AS sft_size,
       (sum(ct_added) OVER (ORDER BY round))::BIGINT AS ct_size
FROM added
""",
        {
            "round": "routing round",
            "sft_added": "episodes routed to SFT in the round",
            "ct_added": "episodes routed to CT in the round",
            "sft_size": "SFT pile size after the round",
            "ct_size": "CT pile size after the round",
        },
    ),
    View(
        "override_rates",
        "interactive annotation: how often each annotator overrode the model's proposal, per round",
        ("episodes",),
        """
WITH u AS (  -- unnest in the select list (a lateral UNNEST under the filter plans as a slow delim join)
  SELECT round, annotator, "group", UNNEST(steps) AS step FROM episodes
)
SELECT round, coalesce(step.decided_by, annotator) AS annotator, "group",
       count(*) AS n_decisions,
       count(*) FILTER (WHERE step.decision = 'overridden') AS n_overridden,
       (count(*) FILTER (WHERE step.decision = 'overridden'))::DOUBLE / count(*) AS override_rate
FROM u
WHERE step.decision IS NOT NULL
GROUP BY ALL
""",
        {
            "annotator": "who decided (the step's decided_by, else the episode's annotator)",
            "n_decisions": "steps where the annotator accepted or overrode a proposal",
            "n_overridden": "of them overridden",
            "override_rate": "n_overridden / n_decisions",
        },
    ),
    View(
        "session_status",
        "every ingested input: sessions with their status, and inputs that only reached quarantine, with the reason",
        ("sessions", "quarantine"),
        """
WITH q AS (
  SELECT landed_uri, any_value(source) AS source, max(round) AS round, max(quarantined_at) AS quarantined_at,
         string_agg(error_type || ': ' || error, '; ' ORDER BY quarantined_at, error_type) AS reason
  FROM quarantine GROUP BY landed_uri
)
SELECT s.session_id, s.source, s.annotator, s."group", s.status, s.round, s.n_episodes, s.n_actions,
       s.duration_s, s.thought_share, s.asr_confidence, s.problems,
       coalesce(q.reason, array_to_string(s.problems, '; ')) AS reason,
       s.landed_uri, s.content_sha256, s.ingested_at
FROM sessions s LEFT JOIN q ON q.landed_uri = s.landed_uri
UNION ALL
SELECT regexp_extract(q.landed_uri, '([^/\\\\]+?)(\\.zip|\\.tar\\.gz|\\.tgz|\\.jsonl|\\.json)?/?$', 1) AS session_id,
       q.source, NULL, NULL, 'quarantined', q.round, 0, NULL, NULL, NULL, NULL, NULL::VARCHAR[],
       q.reason, q.landed_uri, NULL, q.quarantined_at
FROM q WHERE q.landed_uri NOT IN (SELECT landed_uri FROM sessions WHERE landed_uri IS NOT NULL)
""",
        {
            "session_id": "the session id; for inputs that never became a session, the input's file name",
            "status": "landed | quarantined",
            "reason": "quarantine errors for the input, else its problem codes ('' when none)",
            "ingested_at": "when the session was ingested, or its input quarantined (UTC)",
        },
    ),
    View(
        "episode_validators",
        "per judged episode: the validators that judged it (name@version, '+'-joined) and how many failed",
        ("verdicts",),
        """
WITH v AS (  -- one row per (episode, validator@version) first: a DISTINCT string_agg over every verdict is slow
  SELECT episode_id, validator || '@' || version AS v, max(round) AS round,
         count(*) FILTER (WHERE NOT passed) AS n_failed
  FROM verdicts
  GROUP BY episode_id, validator, version
)
SELECT episode_id, max(round) AS round, string_agg(v, '+' ORDER BY v) AS validators, count(*) AS n_validators,
       sum(n_failed)::BIGINT AS n_failed
FROM v
GROUP BY episode_id
""",
        {
            "round": "latest round in which the episode was judged",
            "validators": "validator set, e.g. outcome@1+structural@1",
            "n_validators": "validators that judged it (name@version counted once)",
            "n_failed": "validators that failed it",
        },
    ),
    View(
        "audited",
        "per audited SFT episode: the latest verdict of each auditor combined (bad if any auditor says bad)",
        ("audits", "sft", "verdicts"),
        """
WITH latest AS (
  SELECT * FROM audits
  QUALIFY row_number() OVER (PARTITION BY episode_id, auditor ORDER BY recorded_at DESC, audit_id) = 1
)
SELECT l.episode_id, any_value(p.round) AS round, any_value(p.source) AS source,
       coalesce(any_value(v.validators), '(none)') AS validators,
       count(*) AS n_auditors, bool_and(l.verdict = 'good') AS good,
       string_agg(l.auditor, ',' ORDER BY l.auditor) AS auditors, max(l.recorded_at) AS recorded_at
FROM latest l
JOIN sft_thin p ON p.episode_id = l.episode_id
LEFT JOIN (
  SELECT episode_id,
         string_agg(DISTINCT validator || '@' || version, '+' ORDER BY validator || '@' || version) AS validators
  FROM verdicts GROUP BY episode_id
) v ON v.episode_id = l.episode_id
GROUP BY l.episode_id
""",
        {
            "round": "round of the SFT episode",
            "validators": "validator set that passed it ('(none)' without verdict rows)",
            "n_auditors": "auditors who judged it",
            "good": "true when every auditor's latest verdict is good",
            "auditors": "comma-joined auditor names",
            "recorded_at": "latest verdict time",
        },
    ),
)

VIEW_NAMES = tuple(v.name for v in VIEWS)


def view_column_docs(v: View) -> dict[str, str]:
    """A view's column docs: its own, then those of the same-named columns of the tables it reads."""
    out: dict[str, str] = {}
    for t in v.needs:
        out.update(TABLE_COLUMN_DOCS[t])
    out.update({k: v for k, v in _STEP_COLS.items() if k != "index"} if v.name == "steps" else {})
    out.update(v.columns)
    return out


def tables_behind(names: Iterable[str]) -> set[str]:
    """The base tables that the convenience views among `names` read (so version pins reach through views)."""
    names = set(names)
    if names & {"lake_columns", "lake_views"}:  # the catalog views describe every table
        return set(TABLES)
    by_name = {v.name: v for v in VIEWS}
    return {t for n in names if n in by_name for t in by_name[n].needs}


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def define_analyst_views(con: duckdb.DuckDBPyConnection, tables: Iterable[str] | None = None) -> list[str]:
    """Create the convenience views whose tables are registered on `con`, and COMMENT every column.

    `tables`: the base tables registered on the connection (None: all). Returns the views created.
    """
    present = set(TABLES if tables is None else tables)
    made = [v for v in VIEWS if set(v.needs) <= present]
    con.execute(";\n".join(f"CREATE OR REPLACE VIEW {v.name} AS {v.sql}" for v in made) or "SELECT 1")
    con.execute(
        """CREATE OR REPLACE VIEW lake_columns AS
           SELECT c.table_name, c.column_index, c.column_name, c.data_type, c.comment AS description
           FROM duckdb_columns() c WHERE c.table_name NOT IN ('lake_columns', 'lake_views') AND NOT c.internal
             AND NOT starts_with(c.table_name, '_');
           CREATE OR REPLACE VIEW lake_views AS
           SELECT view_name AS name, comment AS description FROM duckdb_views()
           WHERE NOT internal AND view_name NOT IN ('lake_columns', 'lake_views') AND NOT starts_with(view_name, '_')"""
    )
    piles = {f"{n}_thin" for n in ("sft", "ct") if n in present}
    docs = [(n, TABLE_DOCS[n], TABLE_COLUMN_DOCS[n]) for n in REGISTERED if n in present | piles]
    docs += [(v.name, v.doc, view_column_docs(v)) for v in made]
    cols = set(con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal").fetchall())
    stmts = [f"COMMENT ON VIEW {name} IS {_q(doc)}" for name, doc, _ in docs]
    stmts += [
        f'COMMENT ON COLUMN {name}."{c}" IS {_q(d)}' for name, _, cd in docs for c, d in cd.items() if (name, c) in cols
    ]
    con.execute(";\n".join(stmts))  # one round trip: a connection is opened per query
    return [v.name for v in made]


# ---------------------------------------------------------------------------------------------------- Polars
def polars_storage_options(lake: Lake) -> dict[str, str | int]:
    """The lake's storage options as Polars wants them: lowercase keys, `max_retries` as an int (Polars checks its
    type); empty for a local lake."""
    out: dict[str, str | int] = {k.lower(): v for k, v in lake.storage_options.items()}
    if "max_retries" in out:
        out["max_retries"] = int(out["max_retries"])
    return out


def scan_table(lake: Lake, name: str, version: int | None = None):  # noqa: ANN201 - polars.LazyFrame
    """`pl.scan_delta` of one table: the documented way for Polars users to read the lake."""
    import polars as pl

    return pl.scan_delta(lake.table_uri(name), version=version, storage_options=polars_storage_options(lake) or None)


def column_reference(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown of every table's and view's columns with their types and descriptions (for docs/queries.md)."""
    lines: list[str] = []
    names = [*REGISTERED, *VIEW_NAMES]
    for name in names:
        rows = con.execute(
            "SELECT column_name, data_type, comment FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index",
            [name],
        ).fetchall()
        if not rows:
            continue
        doc = con.execute("SELECT comment FROM duckdb_views() WHERE view_name = ?", [name]).fetchone()
        kind = (
            "view"
            if name in VIEW_NAMES
            else ("pile view: the thin rows joined to episodes" if name in ("sft", "ct") else "table")
        )
        lines += [
            f"### `{name}` ({kind})",
            "",
            (doc[0] if doc and doc[0] else ""),
            "",
            "| column | type | meaning |",
            "| --- | --- | --- |",
        ]
        for col, typ, comment in rows:
            short = typ if len(typ) <= 40 else ("STRUCT(...)[]" if typ.endswith("[]") else typ.split("(")[0] + "(...)")
            lines.append(f"| `{col}` | {short} | {(comment or '').replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


BEGIN, END = "<!-- column-reference:begin -->", "<!-- column-reference:end -->"
