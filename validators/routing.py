"""The routing rule of the flywheel (UI-TARS-2 section 2.3): D_SFT(r+1) = D_SFT(r) + {new s: V(s) = 1} and
D_CT(r+1) = D_CT(r) + {new s: V(s) = 0}, where V(s) is the AND of the validators the routing policy requires for
the episode's source. Every new episode lands in exactly one pile, none twice.

Crash safety comes from idempotent writes in a fixed order, per chunk: verdicts, then sft, then ct. A re-run routes
only episodes that are in neither pile and reuses the verdicts already stored for them (so a decision never
changes between the first and the repairing run). The round's bookkeeping is computed from the lake afterwards,
not from counters in memory, and the invariants (n_new = n_pass + n_fail, every episode in exactly one pile) are
checked there: a violation raises RoutingError.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.iterators import Prefetch, WriteBehind, prefetch
from core.stats import wilson
from schemas.tables import EPISODES, PILE_EPISODE_COLUMNS
from storage import projection
from storage.errors import LakeError
from storage.lake import Lake
from storage.piles import pile_ids
from validators.base import EpisodeBatch, Validator, scatter
from validators.quality import COLUMNS as DQ_COLUMNS
from validators.quality import DataQualityError, DQResult, run_suite
from validators.registry import Policy, ValidationContext, ValidatorSpec, load_policy
from validators.rounds import update_round

Progress = Callable[[str, dict[str, Any]], None]


class RoutingError(LakeError):
    """An invariant of routing does not hold (an episode in both piles or in none): fix before training."""


@dataclass
class RoundSummary:
    round: int
    n_new: int
    n_pass: int
    n_fail: int
    pass_rate: float | None
    pass_rate_lo: float | None
    pass_rate_hi: float | None
    sft_size: int
    ct_size: int
    routed_now: int = 0
    by_source: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_family: dict[str, dict[str, Any]] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    dq: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- statistics
def rate_row(k: int, n: int) -> dict[str, Any]:
    if n == 0:
        return {"n": 0, "n_pass": 0, "pass_rate": None, "lo": None, "hi": None}
    lo, hi = wilson(k, n)
    return {"n": int(n), "n_pass": int(k), "pass_rate": k / n, "lo": float(lo), "hi": float(hi)}


# ------------------------------------------------------------------------------------------------ validation
@dataclass
class Plan:
    """The validators of a policy, built once: one instance per distinct configuration, shared across sources."""

    policy: Policy
    validators: dict[ValidatorSpec, Validator]

    @classmethod
    def build(cls, policy: Policy, context: ValidationContext | None = None) -> Plan:
        return cls(policy, {s: s.build(context) for s in policy.specs()})

    def reads(self) -> Reads:
        """What routing must read for these validators: the union of their `reads` plus what routing itself uses;
        whole episodes when a validator did not declare its reads."""
        if any(v.reads is None for v in self.validators.values()):
            return Reads(list(EPISODES.names), None, [])
        cols = dict.fromkeys(["episode_id", *PILE_EPISODE_COLUMNS])
        fields: dict[str, bool] = {}  # field -> may it come as a dictionary array
        for v in self.validators.values():
            for r in v.reads or ():
                top, _, sub = r.partition(".")
                cols[top] = None
                if sub:
                    fields[sub] = fields.get(sub, True) and r in v.accepts_dictionary
        if "steps" in cols and not fields:
            fields["index"] = False  # the step count only: one narrow required field carries the list structure
        return Reads(list(cols), list(fields), [f for f, d in fields.items() if d])

    def prepare(self, lake: Lake, sources: set[str] | None = None) -> None:
        """Let validators load what they need (pile indexes); only those the given sources use, when given:
        a pile index costs time linear in the piles, and a validator no new episode needs must not pay it."""
        used = None if sources is None else {sp for s in sources for sp in self.policy.for_source(s)}
        for spec, v in self.validators.items():
            prep = getattr(v, "prepare", None)
            if prep is not None and (used is None or spec in used):
                prep(lake)


@dataclass(frozen=True)
class Reads:
    """Episode columns and step fields routing reads (step_fields None: whole steps), and the step fields it reads
    as dictionary arrays."""

    columns: list[str]
    step_fields: list[str] | None
    dictionary_fields: list[str]

    @property
    def loaded(self) -> frozenset[str] | None:
        return (
            None if self.step_fields is None else frozenset([*self.columns, *(f"steps.{f}" for f in self.step_fields)])
        )


@dataclass
class Decision:
    """V(s) for a batch: verdict rows for the verdicts table, and per episode passed + failing reason codes."""

    verdicts: pa.Table | None
    passed: np.ndarray
    reasons: pa.Array  # list<string> per episode (empty when passed)
    used: list[Validator]
    pile_columns: dict[str, pa.Array] = field(default_factory=dict)  # validators' columns for the pile rows


def _prior_for(prior: pa.Table | None, v: Validator) -> pa.Table | None:
    if prior is None or not prior.num_rows:
        return None
    t = prior.filter((pc.field("validator") == v.name) & (pc.field("version") == v.version))
    return t if t.num_rows else None


def decide(
    batch: EpisodeBatch, plan: Plan, round: int, prior: pa.Table | None = None, now: datetime | None = None
) -> Decision:
    """Run every validator the policy requires for each episode's source and combine: V(s) = AND.

    `prior` holds verdicts already stored for this round; where one exists for (episode, validator, version) it
    is used instead of the fresh one, so a repairing run decides exactly as the interrupted one did, and it is left
    out of the returned verdict rows (it is stored already). `now`: the verdicts' validated_at (one per run).
    """
    src_arr = batch.col("source")
    uniq = sorted(pc.unique(src_arr).to_pylist()) if batch.n else []
    passed = np.ones(batch.n, dtype=bool)
    fail_ep: list[np.ndarray] = []
    fail_order: list[np.ndarray] = []
    fail_code: list[pa.Array] = []
    parts: list[pa.Table] = []
    used: list[Validator] = []
    extra: dict[str, pa.Array] = {}
    now_ = pa.scalar(now or datetime.now(UTC), pa.timestamp("us", tz="UTC"))
    for order, (spec, v) in enumerate(plan.validators.items()):
        users = [s for s in uniq if spec in plan.policy.for_source(s)]
        if not users:
            continue
        if len(users) == len(uniq):
            idx = np.arange(batch.n)
            sub = batch
        else:
            idx = np.flatnonzero(np.asarray(pc.is_in(src_arr, pa.array(users)).to_numpy(zero_copy_only=False)))
            if not len(idx):
                continue
            sub = batch.take(idx)
        res = v.check_batch(sub)
        used.append(v)
        for name, col in v.pile_columns(sub).items():
            if name not in extra:
                extra[name] = col if len(idx) == batch.n else scatter(col, idx, batch.n)
        pri = _prior_for(prior, v)
        stored = None
        if pri is not None:  # reuse stored verdicts for the same key
            pos = pc.index_in(res.column("episode_id"), value_set=pri.column("episode_id"))
            found = np.asarray(pc.is_valid(pos).to_numpy(zero_copy_only=False), dtype=bool)
            if found.any():
                cols = {}
                take = pc.fill_null(pos, 0)
                for c in ("passed", "reason", "score", "details"):
                    cols[c] = pc.if_else(pa.array(found), pc.take(pri.column(c), take), res.column(c))
                res = pa.table({"episode_id": res.column("episode_id"), **cols})
                stored = found
        ok = np.asarray(res.column("passed").to_numpy(zero_copy_only=False), dtype=bool)
        passed[idx] &= ok
        bad = np.flatnonzero(~ok)
        if len(bad):
            fail_ep.append(idx[bad])
            fail_order.append(np.full(len(bad), order))
            fail_code.append(res.column("reason").take(pa.array(bad)).combine_chunks())
        n = res.num_rows
        part = pa.table(
            {
                "episode_id": res.column("episode_id"),
                "round": pa.array(np.full(n, round, dtype=np.int32)),
                "validator": pa.repeat(pa.scalar(v.name), n),
                "version": pa.repeat(pa.scalar(v.version), n),
                "passed": res.column("passed"),
                "reason": res.column("reason"),
                "score": res.column("score"),
                "details": res.column("details"),
                "validated_at": pa.repeat(now_, n),
            }
        )
        parts.append(part if stored is None else part.filter(pa.array(~stored)))
    verdicts = pa.concat_tables(parts) if parts else None
    reasons = _reason_lists(batch.n, fail_ep, fail_order, fail_code)
    return Decision(verdicts, passed, reasons, used, extra)


def _reason_lists(n: int, eps: list[np.ndarray], orders: list[np.ndarray], codes: list[pa.Array]) -> pa.Array:
    """Per episode, its distinct failing reason codes in policy order (list<string>)."""
    if not eps:
        return pa.array([[] for _ in range(n)], pa.list_(pa.string()))
    t = pa.table({"ep": np.concatenate(eps), "o": np.concatenate(orders), "r": pa.concat_arrays(codes)})
    t = (
        t.group_by(["ep", "r"], use_threads=False)
        .aggregate([("o", "min")])
        .sort_by([("ep", "ascending"), ("o_min", "ascending")])
    )
    ep = t.column("ep").to_numpy()
    counts = np.bincount(ep, minlength=n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), t.column("r").combine_chunks())


# ------------------------------------------------------------------------------------------------- routing
def new_episodes_filter(round: int, routed: pa.Array) -> pc.Expression:
    flt = pc.field("round") == round
    return flt & ~pc.field("episode_id").isin(routed) if len(routed) else flt


def route_round(
    lake: Lake,
    round: int,
    *,
    policy: Policy | None = None,
    plan: Plan | None = None,
    allow_failed_dq: bool = False,
    chunk_size: int = 200_000,
    progress: Progress | None = None,
    run_dq: bool = True,
) -> RoundSummary:
    """Validate the new episodes of `round` (those in neither pile) and route them; update `rounds`.

    Raises DataQualityError when the batch fails its GX suite (unless `allow_failed_dq`, which is recorded),
    RoutingError when an invariant does not hold afterwards. Safe to re-run at any point.
    """
    say = progress or (lambda stage, info: None)
    routed = pile_ids(lake, round)  # a pile row's round is its episode's: the rest of the piles cannot match
    new_meta = lake.read("episodes", DQ_COLUMNS + ["task_family"], filter=new_episodes_filter(round, routed))
    say("loaded", {"n": new_meta.num_rows})
    routed_now = 0
    chunks: Prefetch[pa.Table] | None = None
    if new_meta.num_rows:
        plan = plan or Plan.build(policy or load_policy(), ValidationContext(lake=lake))
        r = plan.reads()
        tables = projection.scan(lake, "episodes", r.columns, step_fields=r.step_fields, dictionary_fields=r.dictionary_fields,
                                 filter=new_episodes_filter(round, routed))  # fmt: skip
        chunks = prefetch(_chunks(tables, chunk_size), "route-read")
    dq: DQResult | None = None
    with chunks or contextlib.nullcontext(), ThreadPoolExecutor(1, thread_name_prefix="route-dq") as pool:
        # the GX suite runs in a thread while the first chunk is read (another thread: Arrow releases the GIL) and
        # judged; nothing is written before it has passed
        suite = pool.submit(_timed_suite, new_meta, round) if new_meta.num_rows and run_dq else None

        def gate() -> None:
            """Before the first write: the suite's verdict (stored either way; a failure stops the round)."""
            nonlocal dq
            if suite is None:
                return
            dq, took = suite.result()
            if not dq.success:
                if not allow_failed_dq:
                    lake.append("dq_results", [dq.row()])
                    update_round(lake, round, breakdown={"dq": _dq_info(dq)})
                    raise DataQualityError(
                        f"round {round}: batch {dq.batch_id[:12]} ({new_meta.num_rows} episodes) failed data quality, "
                        f"nothing routed. {dq.message()}. Fix the input, or route anyway with --allow-failed-dq (recorded)."
                    )
                dq = DQResult(**{**asdict(dq), "overridden": True})
            lake.append("dq_results", [dq.row()])
            say("dq", {"success": dq.success, "overridden": dq.overridden, **took})

        if chunks is not None and plan is not None:
            plan.prepare(lake, set(pc.unique(new_meta.column("source")).to_pylist()))
            has_prior = lake.dataset("verdicts").count_rows(filter=pc.field("round") == round) > 0
            prior = lake.read("verdicts", filter=pc.field("round") == round) if has_prior else None
            routed_now = _route_chunks(lake, round, chunks, plan, prior, say, r.loaded, gate)
        else:
            gate()
    summary = summarize(lake, round)
    summary.routed_now = routed_now
    summary.dq = _dq_info(dq) if dq else None
    fields_ = {
        k: getattr(summary, k)
        for k in ("n_new", "n_pass", "n_fail", "pass_rate", "pass_rate_lo", "pass_rate_hi", "sft_size", "ct_size")
    }
    breakdown: dict[str, Any] = {
        "by_source": summary.by_source,
        "by_family": summary.by_family,
        "reasons": summary.reasons,
    }
    if dq:
        breakdown["dq"] = summary.dq
    update_round(lake, round, breakdown=breakdown, **fields_)
    say("done", summary.as_dict())
    return summary


def _timed_suite(table: pa.Table, round: int) -> tuple[DQResult, dict[str, float]]:
    """The suite's result, its wall time and its CPU time (this thread's: the suite runs beside the routing)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    return run_suite(table, round), {"s": time.perf_counter() - t0, "cpu_s": time.thread_time() - c0}


def _dq_info(dq: DQResult) -> dict[str, Any]:
    return {"batch_id": dq.batch_id, "success": dq.success, "n_failed": dq.n_failed, "n_expectations": dq.n_expectations,
            "overridden": dq.overridden, "failed": [f["expectation"] + f"({f.get('column')})" for f in dq.failed]}  # fmt: skip


def _chunks(tables: Any, size: int) -> Any:
    """Tables (one per data file) regrouped into chunks of about `size` rows (no nested column is copied)."""
    buf: list[pa.Table] = []
    n = 0
    for t in tables:
        while t.num_rows:
            take = t.slice(0, size - n)
            buf.append(take)
            n += take.num_rows
            t = t.slice(take.num_rows)
            if n >= size:
                yield pa.concat_tables(buf)
                buf, n = [], 0
    if buf:
        yield pa.concat_tables(buf)


def _route_chunks(
    lake: Lake,
    round: int,
    chunks: Iterator[pa.Table],
    plan: Plan,
    prior: pa.Table | None,
    say: Progress,
    loaded: frozenset[str] | None,
    gate: Callable[[], None] = lambda: None,
) -> int:
    """Decide each chunk here and write it in a writer thread (Parquet encoding and Delta commits release the GIL),
    so chunk k is written while chunk k+1 is judged and chunk k+2 read: the three stages share the cores.

    Chunks are written one at a time, in order, each as verdicts, then sft, then ct; at most one write is in
    flight. A validator's state (dedup keys) takes in chunk k as soon as it is decided, which is what chunk k+1
    must see; if a write fails, the later chunks are never written (the error is raised here) and a re-run
    repairs the round. `gate` runs once before the first write (in the writer's thread, so the GX suite's wait
    overlaps judging the second chunk), and raises to stop the round before any."""
    run_ts = datetime.now(UTC)  # every verdict of this run carries it
    own: set[str] = set()  # the verdict files this run committed (see write_decision)
    routed = 0

    def done(n: int) -> None:
        nonlocal routed
        routed += n

    def gated_write(*args: Any) -> int:
        gate()
        return write_decision(*args)

    with WriteBehind("route-write", on_done=done) as writer:
        for table in chunks:
            batch = EpisodeBatch(table, loaded)
            try:
                d = decide(batch, plan, round, prior, now=run_ts)
            except Exception:
                # a failed suite explains bad input better than a validator's error does
                if writer.started:
                    writer.drain()  # the first write's gate
                else:
                    gate()
                raise
            for v in d.used:
                v.after_batch(batch, d.passed)
            # the first write waits for the suite in the writer's thread, so the next chunk is judged meanwhile
            writer.submit(write_decision if writer.started else gated_write, lake, round, table, d, say, own)
        writer.drain()
        if not writer.started:
            gate()  # no chunk at all
    return routed


def write_decision(
    lake: Lake, round: int, table: pa.Table, d: Decision, say: Progress, own_files: set[str] | None = None
) -> int:
    """Route one decided chunk: verdicts, then sft, then ct (each idempotent).

    Verdicts: `decide` leaves out those already stored (`prior`, read at the start of the run), and the chunks of
    one run judge disjoint episodes, so the append need not re-read the verdict files this run committed itself
    (`own_files`, filled in by Lake.append); it reads every other committed file of the round, whatever its
    writer's start time, and a commit that lost a race is redone on the new snapshot.
    Pile rows are thin (schemas.tables.SFT / CT): the episode's id and flat columns, the routing round, the
    validators' pile columns (the exact-dedup content key) and, for CT, the failing reasons."""
    n_rows = table.num_rows
    if d.verdicts is not None:
        lake.append("verdicts", d.verdicts, own_files=own_files)
    say("verdicts_written", {"n": n_rows})
    cols = {c: table.column(c) for c in PILE_EPISODE_COLUMNS}
    cols["round_routed"] = pa.array(np.full(n_rows, round, dtype=np.int32))
    rows = pa.table({**cols, **d.pile_columns})
    mask = pa.array(d.passed)
    indexes = [ix for v in d.used for ix in v.pile_indexes(lake)]
    n_sft = lake.append("sft", rows.filter(mask), indexes=indexes)
    say("sft_appended", {"n": n_sft})
    ct = rows.append_column(pa.field("reasons", pa.list_(pa.string()), nullable=False), d.reasons)
    n_ct = lake.append("ct", ct.filter(pc.invert(mask)), indexes=indexes)
    say("ct_appended", {"n": n_ct})
    return n_sft + n_ct


# ------------------------------------------------------------------------------------------------ summary
def summarize(lake: Lake, round: int) -> RoundSummary:
    """The round's numbers from the lake itself, with the invariants checked (RoutingError otherwise)."""
    cols = ["episode_id", "source", "task_family"]
    eps = lake.read("episodes", cols, filter=pc.field("round") == round)
    sft = lake.read("sft", cols, filter=pc.field("round_routed") == round)
    ct = lake.read("ct", cols + ["reasons"], filter=pc.field("round_routed") == round)
    sft_ids, ct_ids = sft.column("episode_id"), ct.column("episode_id")
    problems = []
    both = (
        pc.filter(sft_ids, pc.is_in(sft_ids, value_set=ct_ids.combine_chunks()))
        if ct.num_rows and sft.num_rows
        else pa.array([], pa.string())
    )
    if len(both):
        problems.append(f"{len(both)} episode(s) in both sft and ct, e.g. {both[0]}")
    routed = pa.concat_arrays([sft_ids.combine_chunks(), ct_ids.combine_chunks()])
    ids = eps.column("episode_id").combine_chunks()
    unrouted = pc.filter(ids, pc.invert(pc.is_in(ids, value_set=routed))) if len(ids) else ids
    if len(unrouted):
        problems.append(f"{len(unrouted)} episode(s) of round {round} in neither pile, e.g. {unrouted[0]}")
    n_new, n_pass, n_fail = eps.num_rows, sft.num_rows, ct.num_rows
    if n_new != n_pass + n_fail:
        problems.append(f"n_new={n_new} != n_pass={n_pass} + n_fail={n_fail}")
    if problems:
        raise RoutingError(f"round {round}: routing invariants violated: " + "; ".join(problems))
    rate = rate_row(n_pass, n_new)
    reasons: dict[str, int] = {}
    if ct.num_rows:
        vc = pc.value_counts(pc.list_flatten(ct.column("reasons")))
        reasons = {d["values"]: int(d["counts"]) for d in vc.to_pylist()}
    return RoundSummary(
        round=round,
        n_new=n_new,
        n_pass=n_pass,
        n_fail=n_fail,
        pass_rate=rate["pass_rate"],
        pass_rate_lo=rate["lo"],
        pass_rate_hi=rate["hi"],
        sft_size=lake.count("sft"),
        ct_size=lake.count("ct"),
        by_source=_breakdown(sft, ct, "source"),
        by_family=_breakdown(sft, ct, "task_family"),
        reasons=dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
    )


def _breakdown(sft: pa.Table, ct: pa.Table, col: str) -> dict[str, dict[str, Any]]:
    def counts(t: pa.Table) -> dict[str, int]:
        if not t.num_rows:
            return {}
        vc = pc.value_counts(pc.fill_null(t.column(col), "(none)"))
        return {d["values"]: int(d["counts"]) for d in vc.to_pylist()}

    p, f = counts(sft), counts(ct)
    return {k: rate_row(p.get(k, 0), p.get(k, 0) + f.get(k, 0)) for k in sorted(set(p) | set(f))}
