"""Audits of the SFT pile: draw a reproducible sample of passed episodes, record hand verdicts, estimate precision.

The report's warning is that a lenient validator fills SFT with failures, and only a hand check of a random sample
of passed episodes shows it. Precision here is the share of SFT episodes that are truly good; an audit of n
randomly drawn episodes with k judged good estimates it with a binomial interval (Wilson by default,
Clopper-Pearson on request, both from statsmodels). The sample is drawn from the pile sorted by episode id, with
numpy's PCG64 seeded by the auditor's seed, so the same (round, seed, n, strata, pile version) always gives the
same episodes. Sampling and reporting only read the piles; recording appends to the `audits` table.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from core.stats import wilson
from storage.lake import Lake, content_id
from storage.piles import read_pile

#: Columns a sample can be stratified by.
STRATA = ("source", "validators", "task_family", "group")
VERDICTS = ("good", "bad")
METHODS = {"wilson": "wilson", "clopper-pearson": "beta"}
LEVELS = ("round", "source", "validators")


@dataclass(frozen=True)
class Candidates:
    """The SFT episodes of one round that an audit can draw from, at a pinned pile version."""

    round: int
    pile_version: int
    frame: pl.DataFrame  # episode_id, round, source, task_family, group, validators; sorted by episode_id


@dataclass(frozen=True)
class AuditSample:
    round: int
    seed: int
    n_requested: int
    stratify: tuple[str, ...]
    pile_version: int
    population: int
    episodes: pl.DataFrame  # the drawn candidate rows, in draw order, with a `stratum` column
    strata: dict[str, tuple[int, int]] = field(default_factory=dict)  # stratum -> (population, drawn)


def validator_sets(lake: Lake, episode_ids: pa.Array | pa.ChunkedArray | None = None) -> pl.DataFrame:
    """episode_id -> the '+'-joined name@version of the validators that judged it (as in the `audited` view)."""
    if episode_ids is not None and len(episode_ids) == 0:
        return pl.DataFrame(schema={"episode_id": pl.String, "validators": pl.String})
    flt = None if episode_ids is None else pc.field("episode_id").isin(pa.array(episode_ids.to_pylist(), pa.string()))
    v = pl.from_arrow(lake.read("verdicts", ["episode_id", "validator", "version"], filter=flt))
    assert isinstance(v, pl.DataFrame)
    if v.is_empty():
        return pl.DataFrame(schema={"episode_id": pl.String, "validators": pl.String})
    return (
        v.select("episode_id", (pl.col("validator") + "@" + pl.col("version")).alias("vv"))
        .unique()
        .sort("episode_id", "vv")
        .group_by("episode_id", maintain_order=True)
        .agg(pl.col("vv").str.join("+").alias("validators"))
    )


def candidates(lake: Lake, round: int, pile_version: int | None = None) -> Candidates:
    """The SFT pile's episodes of `round` at `pile_version` (the newest when None), with their validator sets."""
    v = lake.version("sft") if pile_version is None else pile_version
    cols = ["episode_id", "round", "source", "task_family", "group"]
    t = read_pile(lake, "sft", cols, version=v, filter=pc.field("round") == round)
    frame = pl.from_arrow(t)
    assert isinstance(frame, pl.DataFrame)
    vs = validator_sets(lake, t.column("episode_id"))
    frame = (
        frame.join(vs, on="episode_id", how="left")
        .with_columns(pl.col("validators").fill_null("(none)"))
        .unique("episode_id", keep="first")
        .sort("episode_id")
    )
    return Candidates(round, v, frame)


def _allocate(sizes: Sequence[int], n: int) -> list[int]:
    """Proportional allocation of n draws over strata (largest remainder), never more than a stratum holds."""
    total = sum(sizes)
    n = min(n, total)
    if total == 0:
        return [0] * len(sizes)
    quotas = [n * s / total for s in sizes]
    alloc = [min(math.floor(q), s) for q, s in zip(quotas, sizes)]
    order = sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - math.floor(quotas[i])), i))
    while sum(alloc) < n:
        moved = False
        for i in order:
            if sum(alloc) >= n:
                break
            if alloc[i] < sizes[i]:
                alloc[i] += 1
                moved = True
        if not moved:
            break
    return alloc


def draw(c: Candidates, n: int, seed: int, stratify: Sequence[str] = ()) -> AuditSample:
    """Draw min(n, pile) episodes without replacement, reproducibly; proportionally per stratum when asked.

    Proportional allocation keeps the pooled sample self-weighting, so the round's precision is estimated by the
    plain share of good episodes in it.
    """
    if n < 1:
        raise ValueError(f"--n must be at least 1, got {n}")
    bad = [s for s in stratify if s not in STRATA]
    if bad:
        raise ValueError(f"cannot stratify by {', '.join(bad)}; choose from {', '.join(STRATA)}")
    rng = np.random.default_rng(seed)
    f = c.frame.with_columns(
        (
            pl.concat_str([pl.col(s).fill_null("(none)") for s in stratify], separator="|")
            if stratify
            else pl.lit("all")
        ).alias("stratum")
    )
    groups = sorted(f.partition_by("stratum", as_dict=True, maintain_order=True).items(), key=lambda kv: kv[0][0])
    alloc = _allocate([g.height for _, g in groups], n)
    parts, strata = [], {}
    for ((name,), g), k in zip(groups, alloc):
        idx = rng.choice(g.height, size=k, replace=False) if k else np.array([], dtype=np.int64)
        parts.append(g[idx.tolist()])
        strata[str(name)] = (g.height, k)
    drawn = pl.concat(parts) if parts else f.clear()
    return AuditSample(c.round, seed, n, tuple(stratify), c.pile_version, c.frame.height, drawn, strata)


def sample(
    lake: Lake, round: int, n: int, seed: int, stratify: Sequence[str] = (), pile_version: int | None = None
) -> AuditSample:
    c = candidates(lake, round, pile_version)
    if c.frame.is_empty():
        raise ValueError(f"the SFT pile has no episodes of round {round} (pile version {c.pile_version})")
    return draw(c, n, seed, stratify)


# ---------------------------------------------------------------------------------------------------- record
@dataclass(frozen=True)
class RecordResult:
    added: int
    already: int
    blank: int
    errors: tuple[str, ...]


def read_sheet(path: Path, auditor: str | None = None) -> tuple[list[dict], int, list[str]]:
    """Parse a filled-in audit CSV into audits rows; returns (rows, blank rows, 'line N: problem' errors)."""
    rows, errors, blank = [], [], 0
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        missing = {"episode_id", "verdict"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path} is not an audit sheet: no {', '.join(sorted(missing))} column")
        for line, r in enumerate(reader, start=2):
            verdict = (r.get("verdict") or "").strip().lower()
            eid = (r.get("episode_id") or "").strip()
            if not verdict:
                blank += 1
                continue
            if verdict not in VERDICTS:
                errors.append(f"line {line}: verdict {verdict!r} is not good or bad")
                continue
            who = (r.get("auditor") or "").strip() or auditor
            if not who:
                errors.append(f"line {line}: no auditor (fill the auditor column or pass --auditor)")
                continue
            seed = (r.get("seed") or "").strip()
            rnd = (r.get("round") or "").strip()
            try:
                rows.append(
                    {
                        "episode_id": eid,
                        "seed": int(seed) if seed else None,
                        "csv_round": int(rnd) if rnd else None,
                        "auditor": who,
                        "verdict": verdict,
                        "note": (r.get("note") or "").strip() or None,
                        "line": line,
                    }
                )
            except ValueError:
                errors.append(f"line {line}: seed and round must be integers")
    return rows, blank, errors


def record(lake: Lake, path: Path, auditor: str | None = None, now: datetime | None = None) -> RecordResult:
    """Append the sheet's verdicts to `audits` (append-only, idempotent: the same verdict twice is one row).

    Rows naming an episode that is not in the SFT pile, or a round that disagrees with the pile, are refused
    with their line number; the other rows are recorded.
    """
    rows, blank, errors = read_sheet(path, auditor)
    added, n, more = record_rows(lake, rows, now)
    return RecordResult(added, n - added, blank, tuple(errors + more))


def record_rows(lake: Lake, rows: list[dict], now: datetime | None = None) -> tuple[int, int, list[str]]:
    """Append verdict rows ({episode_id, seed, csv_round, auditor, verdict, note, line}) to `audits`; returns
    (added, valid rows, 'line N: problem' errors). The one writer of audits: the CSV path and the workbench."""
    errors: list[str] = []
    round_of: dict[str, int] = {}
    if rows:
        ids = pa.array(sorted({r["episode_id"] for r in rows}), pa.string())
        pile = lake.read("sft", ["episode_id", "round"], filter=pc.field("episode_id").isin(ids)).to_pylist()
        round_of = {p["episode_id"]: p["round"] for p in pile}
    now = now or datetime.now(UTC)
    out = []
    for r in rows:
        rnd = round_of.get(r["episode_id"])
        if rnd is None:
            errors.append(f"line {r['line']}: episode {r['episode_id']!r} is not in the SFT pile")
            continue
        if r["csv_round"] is not None and r["csv_round"] != rnd:
            errors.append(f"line {r['line']}: round {r['csv_round']} but the episode is of round {rnd}")
            continue
        out.append(
            {
                "audit_id": content_id(
                    str(rnd), r["episode_id"], str(r["seed"]), r["auditor"], r["verdict"], r["note"] or ""
                ),
                "round": rnd,
                "episode_id": r["episode_id"],
                "seed": r["seed"],
                "auditor": r["auditor"],
                "verdict": r["verdict"],
                "note": r["note"],
                "recorded_at": now,
            }
        )
    added = lake.append("audits", out) if out else 0
    return added, len(out), errors


# ---------------------------------------------------------------------------------------------------- report
def precision_interval(k: int, n: int, method: str = "wilson", alpha: float = 0.05) -> tuple[float, float, float]:
    """(k/n, lo, hi): the share of good episodes with its (1 - alpha) binomial interval."""
    from statsmodels.stats.proportion import proportion_confint

    if method not in METHODS:
        raise ValueError(f"unknown interval method {method!r}; choose from {', '.join(METHODS)}")
    if n <= 0:  # no rate, so no interval (core.stats)
        return (float("nan"), float("nan"), float("nan"))
    if method == "wilson":
        lo, hi = wilson(k, n, alpha)
    else:
        lo, hi = proportion_confint(k, n, alpha=alpha, method=METHODS[method])
    return (k / n, float(lo), float(hi))


def audited(lake: Lake) -> pl.DataFrame:
    """One row per audited SFT episode (the `audited` view): round, source, validators, good."""
    con = lake.duckdb(tables=["audits", "sft", "verdicts"])
    frame = pl.from_arrow(
        con.sql("SELECT episode_id, round, source, validators, n_auditors, good FROM audited").to_arrow_table()
    )
    assert isinstance(frame, pl.DataFrame)
    return frame


def precision_report(
    audited: pl.DataFrame,
    levels: Iterable[Sequence[str]] = (("round",), ("round", "source"), ("round", "source", "validators")),
    threshold: float = 0.9,
    method: str = "wilson",
    alpha: float = 0.05,
) -> pl.DataFrame:
    """Precision with its interval for each group of each level; round-level rows get a status against threshold.

    status: 'below' when the whole interval is under the threshold, 'maybe below' when the estimate is under it
    but the interval reaches it, 'ok' otherwise (only for level == 'round').
    """
    schema = {
        "level": pl.String, "round": pl.Int32, "source": pl.String, "validators": pl.String, "n_audited": pl.Int64,
        "n_good": pl.Int64, "precision": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "status": pl.String,
    }  # fmt: skip
    out: list[dict] = []
    for lv in levels:
        lv = tuple(lv)
        unknown = [c for c in lv if c not in LEVELS]
        if unknown:
            raise ValueError(f"cannot group by {', '.join(unknown)}; choose from {', '.join(LEVELS)}")
        if audited.is_empty():
            continue
        g = audited.group_by(list(lv)).agg(pl.len().alias("n"), pl.col("good").sum().alias("k")).sort(list(lv))
        for r in g.iter_rows(named=True):
            p, lo, hi = precision_interval(int(r["k"]), int(r["n"]), method, alpha)
            status = None
            if lv == ("round",):
                status = "below" if hi < threshold else ("maybe below" if p < threshold else "ok")
            out.append(
                {
                    "level": ",".join(lv), "round": r["round"], "source": r.get("source"),
                    "validators": r.get("validators"), "n_audited": int(r["n"]), "n_good": int(r["k"]),
                    "precision": p, "lo": lo, "hi": hi, "status": status,
                }
            )  # fmt: skip
    return pl.DataFrame(out, schema=schema)


def expected_width(p: float, n: int, alpha: float = 0.05) -> float:
    """The binomial (normal-approximation) width 2 z sqrt(p(1-p)/n) that an interval on n draws should have."""
    from scipy.stats import norm

    return 2 * float(norm.ppf(1 - alpha / 2)) * math.sqrt(p * (1 - p) / n)
