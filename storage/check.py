"""`flywheel check`: the lake's invariants, verified columnar (DuckDB over the Delta tables, PyArrow for media).

The design's promises (DESIGN.md, "Invariants") are checked on the data as it is, not on counters kept by the code
that wrote it, so a crash, a fault or a hand edit that broke one shows up here:

- nothing duplicated: no key occurs twice in any table;
- every routed episode in exactly one pile: no episode in both sft and ct, none in a pile without being in
  episodes, none of a routed round (one with a `rounds` row) in neither pile;
- counts that match `rounds`: n_new = n_pass + n_fail, n_pass / n_fail = the round's rows in sft / ct, n_new = the
  round's episodes, and sft_size / ct_size between the piles' sizes up to that round and now;
- key indexes agree with the data: every stored key-index sidecar (storage/keyindex.py) holds its file's keys;
- everything referenced is present: every screenshot URI of every step, every training checkpoint, every data file
  of each table's current version and of each pinned version (storage/pins.py).

Each violated invariant is reported once with a count and a few example ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from schemas.tables import TABLES
from storage.delta import forget_snapshots
from storage.errors import LakeError
from storage.health import commit_damage, repair_command
from storage.lake import Lake
from storage.objects import object_key_of
from storage.views import THIN, registered_name

#: How many example ids a violation lists.
EXAMPLES = 5


@dataclass(frozen=True)
class Violation:
    invariant: str  # a fixed code: duplicate_key, pile_overlap, unrouted, round_counts, media_missing, ...
    table: str
    count: int
    message: str
    examples: tuple[str, ...] = ()

    def line(self) -> str:
        ex = f" (e.g. {', '.join(self.examples)})" if self.examples else ""
        return f"{self.invariant} [{self.table}]: {self.count:,} {self.message}{ex}"


@dataclass
class CheckReport:
    lake: str
    violations: list[Violation] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # invariant codes that ran
    stats: dict[str, int] = field(default_factory=dict)  # rows per table, objects referenced, ...
    seconds: dict[str, float] = field(default_factory=dict)  # time per invariant group

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "lake": self.lake,
            "ok": self.ok,
            "violations": [v.__dict__ | {"examples": list(v.examples)} for v in self.violations],
            "checked": self.checked,
            "stats": self.stats,
            "seconds": self.seconds,
        }


def _rows(con: Any, sql: str) -> list[tuple]:
    return con.sql(sql).fetchall()


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ------------------------------------------------------------------------------------------------ invariants
def check_duplicates(lake: Lake, con: Any, report: CheckReport) -> None:
    """No key twice in any table. Keys are hashed to 64 bits first (one narrow column, cheap at 10^8 rows); the
    candidate duplicates are then confirmed on the full key, so a hash collision is never reported."""
    for name, ts in TABLES.items():
        n = report.stats[f"rows.{name}"]
        if n < 2:
            continue
        key = ", ".join(_q(k) for k in ts.key)
        reg = _q(registered_name(name))  # the stored rows (the piles' own names are views over a join)
        label = " || '/' || ".join(f"CAST({_q(k)} AS VARCHAR)" for k in ts.key)
        # every candidate hash (no cap: the count must be the true one), joined back, then confirmed on the key
        dups = (
            f"WITH c AS (SELECT h FROM (SELECT hash({key}) AS h FROM {reg}) GROUP BY h HAVING count(*) > 1) "
            f"SELECT {label} AS k, count(*) AS n FROM {reg} WHERE hash({key}) IN (SELECT h FROM c) "
            "GROUP BY ALL HAVING count(*) > 1"
        )
        n_keys, extra = _rows(con, f"SELECT count(*), coalesce(sum(n - 1), 0) FROM ({dups})")[0]
        if n_keys:
            ex = _rows(con, f"SELECT k FROM ({dups}) ORDER BY k LIMIT {EXAMPLES}")
            report.violations.append(
                Violation(
                    "duplicate_key",
                    name,
                    int(n_keys),
                    f"key(s) occur more than once ({int(extra):,} extra row(s))",
                    tuple(str(k) for (k,) in ex),
                )
            )
    report.checked.append("duplicate_key")


def _violation_from(con: Any, code: str, table: str, sql: str, message: str) -> Violation | None:
    """Run `sql` (one column of ids) as a count plus examples; a Violation when it returns any row."""
    n = _rows(con, f"SELECT count(*) FROM ({sql})")[0][0]
    if not n:
        return None
    ex = _rows(con, f"SELECT * FROM ({sql}) ORDER BY 1 LIMIT {EXAMPLES}")
    return Violation(code, table, int(n), message, tuple(str(r[0]) for r in ex))


def check_piles(lake: Lake, con: Any, report: CheckReport) -> None:
    """Every routed episode in exactly one pile, every pile row an episode, every episode of a routed round routed."""
    found = [
        _violation_from(con, "pile_overlap", "sft+ct", "SELECT episode_id FROM sft_thin INTERSECT SELECT episode_id FROM ct_thin",
                        "episode(s) in both the SFT and the CT pile"),
        _violation_from(con, "pile_orphan", "sft", "SELECT episode_id FROM sft_thin EXCEPT SELECT episode_id FROM episodes",
                        "SFT row(s) whose episode is not in the episodes table"),
        _violation_from(con, "pile_orphan", "ct", "SELECT episode_id FROM ct_thin EXCEPT SELECT episode_id FROM episodes",
                        "CT row(s) whose episode is not in the episodes table"),
        _violation_from(
            con, "unrouted", "episodes",
            "SELECT episode_id FROM episodes WHERE round IN (SELECT round FROM rounds WHERE n_new IS NOT NULL) "
            "EXCEPT SELECT episode_id FROM sft_thin EXCEPT SELECT episode_id FROM ct_thin",
            "episode(s) of a routed round in neither pile (run `flywheel route --round R` again)",
        ),
    ]  # fmt: skip
    report.violations += [v for v in found if v]
    report.checked += ["pile_overlap", "pile_orphan", "unrouted"]


def check_rounds(lake: Lake, con: Any, report: CheckReport) -> None:
    """The `rounds` bookkeeping agrees with the tables it summarises."""
    rows = _rows(
        con,
        """
        WITH e AS (SELECT round, count(*) AS n FROM episodes GROUP BY round),
             s AS (SELECT round_routed AS round, count(*) AS n FROM sft_thin GROUP BY round_routed),
             c AS (SELECT round_routed AS round, count(*) AS n FROM ct_thin GROUP BY round_routed),
             cum AS (SELECT r.round,
                            (SELECT count(*) FROM sft_thin WHERE round_routed <= r.round) AS sft_upto,
                            (SELECT count(*) FROM ct_thin WHERE round_routed <= r.round) AS ct_upto
                     FROM rounds r WHERE r.n_new IS NOT NULL)
        SELECT r.round, r.n_new, r.n_pass, r.n_fail, coalesce(e.n, 0), coalesce(s.n, 0), coalesce(c.n, 0),
               r.sft_size, r.ct_size, cum.sft_upto, cum.ct_upto
        FROM rounds r LEFT JOIN e USING (round) LEFT JOIN s USING (round) LEFT JOIN c USING (round)
             LEFT JOIN cum USING (round)
        WHERE r.n_new IS NOT NULL
        ORDER BY r.round
        """,
    )
    sft_total, ct_total = report.stats["rows.sft"], report.stats["rows.ct"]
    counts: list[str] = []
    sizes: list[str] = []
    for rnd, n_new, n_pass, n_fail, n_eps, n_sft, n_ct, sft_size, ct_size, sft_upto, ct_upto in rows:
        bad = []
        if n_pass is None or n_fail is None or n_new != n_pass + n_fail:
            bad.append(f"n_new={n_new} != n_pass={n_pass} + n_fail={n_fail}")
        if n_pass != n_sft:
            bad.append(f"n_pass={n_pass} but sft has {n_sft}")
        if n_fail != n_ct:
            bad.append(f"n_fail={n_fail} but ct has {n_ct}")
        if n_new != n_eps:
            bad.append(f"n_new={n_new} but episodes has {n_eps}")
        if bad:
            counts.append(f"round {rnd}: " + ", ".join(bad))
        for pile, size, upto, total in (("sft", sft_size, sft_upto, sft_total), ("ct", ct_size, ct_upto, ct_total)):
            if size is None or not upto <= size <= total:
                sizes.append(f"round {rnd}: {pile}_size={size} outside [{upto}, {total}]")
    if counts:
        report.violations.append(
            Violation(
                "round_counts",
                "rounds",
                len(counts),
                "round(s) whose counts disagree with the tables",
                tuple(counts[:EXAMPLES]),
            )
        )
    if sizes:
        report.violations.append(
            Violation(
                "pile_size", "rounds", len(sizes), "pile size(s) outside what the piles allow", tuple(sizes[:EXAMPLES])
            )
        )
    report.stats["rounds.routed"] = len(rows)
    report.checked += ["round_counts", "pile_size"]


def _leaf_path(schema: pq.ParquetSchema, top: str, leaf: str) -> str | None:
    for i in range(len(schema)):
        p = schema.column(i).path
        if p.startswith(top + ".") and p.endswith("." + leaf):
            return p
    return None


def referenced_screenshots(lake: Lake, table: str = "episodes", batch_rows: int = 65_536) -> pa.Array:
    """Distinct screenshot URIs of every step of `table`, reading only that leaf column of each data file."""
    d = lake.dataset(table)
    seen: list[pa.Array] = []
    for f in d.files:
        pf = pq.ParquetFile(f, filesystem=d.filesystem)
        path = _leaf_path(pf.schema, "steps", "screenshot_uri")
        if path is None:
            continue
        for b in pf.iter_batches(batch_size=batch_rows, columns=[path]):
            uris = pc.list_flatten(b.column(0)).field("screenshot_uri")
            seen.append(pc.unique(uris.drop_null()))
        if len(seen) > 64:  # keep memory bounded: fold as we go
            seen = [pc.unique(pa.concat_arrays(seen))]
    if not seen:
        return pa.array([], pa.string())
    return pc.unique(pa.concat_arrays(seen))


def _present(lake: Lake, uris: Iterable[str], listing: Callable[[], set[str]]) -> tuple[list[str], int]:
    """(missing references, references outside the lake not checked): a lake object's key (or an old row's absolute
    URI of any copy of the lake, by its objects/ suffix) is looked up in one listing of objects/."""
    missing, outside = [], 0
    have: set[str] | None = None
    for u in uris:
        key = object_key_of(u)
        if key is None:
            outside += 1
            continue
        if have is None:
            have = listing()
        if key not in have:
            missing.append(u)
    return missing, outside


def check_media(lake: Lake, con: Any, report: CheckReport) -> None:
    """Every screenshot of every step and every checkpoint of every training run is in the object store."""
    cache: dict[str, set[str]] = {}

    def listing() -> set[str]:
        if "objects" not in cache:
            cache["objects"] = set(lake.objects.list("objects/"))
        return cache["objects"]

    shots = referenced_screenshots(lake).to_pylist()
    missing, outside = _present(lake, shots, listing)
    report.stats["media.screenshots_referenced"] = len(shots)
    report.stats["media.screenshots_outside_lake"] = outside
    if missing:
        report.violations.append(
            Violation(
                "media_missing",
                "episodes",
                len(missing),
                "screenshot object(s) referenced by steps but missing",
                tuple(sorted(missing)[:EXAMPLES]),
            )
        )
    ckpts = [r[0] for r in _rows(con, "SELECT DISTINCT c FROM (SELECT output_checkpoint AS c FROM training_runs UNION ALL "
                                      "SELECT base_checkpoint FROM training_runs) WHERE c IS NOT NULL")]  # fmt: skip
    missing, _ = _present(lake, ckpts, listing)
    report.stats["media.checkpoints_referenced"] = len(ckpts)
    if missing:
        report.violations.append(
            Violation(
                "checkpoint_missing",
                "training_runs",
                len(missing),
                "checkpoint object(s) missing",
                tuple(sorted(missing)[:EXAMPLES]),
            )
        )
    report.checked += ["media_missing", "checkpoint_missing"]


def _table_files(lake: Lake, name: str) -> set[str]:
    """Data files present in a table's folder (relative names, as the Delta log writes them)."""
    prefix = f"tables/{name}/"
    return {rel[len(prefix) :] for rel in lake.objects.list(prefix) if "/_delta_log/" not in "/" + rel[len(prefix) :]}


def check_table_files(lake: Lake, report: CheckReport, pins: dict[str, set[int]]) -> None:
    """Every data file of each table's current version, and of every pinned version, exists (vacuum kept it)."""
    from urllib.parse import unquote

    missing: list[str] = []
    unreadable: list[str] = []
    for name in TABLES:
        versions = sorted({None, *pins.get(name, set())}, key=lambda v: -1 if v is None else v)
        present: set[str] | None = None
        for v in versions:
            try:
                dt = lake.delta(name, v)
            except LakeError as e:
                if v is not None:  # the latest version: reported as table_unreadable
                    unreadable.append(f"{name}@{v}: {str(e)[:120]}")
                continue
            adds = dt.get_add_actions(flatten=True).column("path").to_pylist()
            if not adds:
                continue
            if present is None:
                present = _table_files(lake, name)
            gone = [p for p in adds if p not in present and unquote(p) not in present]
            missing += [f"{name}@{'latest' if v is None else v}: {p}" for p in gone]
    if missing:
        report.violations.append(
            Violation(
                "data_file_missing",
                "tables",
                len(missing),
                f"data file(s) of a current or pinned version are missing; recover: `{repair_command(lake)}`",
                tuple(missing[:EXAMPLES]),
            )
        )
    if unreadable:
        report.violations.append(
            Violation(
                "pin_unreadable",
                "tables",
                len(unreadable),
                "pinned version(s) cannot be loaded",
                tuple(unreadable[:EXAMPLES]),
            )
        )
    report.stats["pins"] = sum(len(v) for v in pins.values())
    report.checked += ["data_file_missing", "pin_unreadable"]


def key_indexes(lake: Lake, extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """(table, FileIndex) of every key index to check: the indexed tables' own keys, plus those the layers above keep
    in the lake (the piles' exact-dedup keys, which `validators.lake_check` passes in)."""
    from storage.keyindex import key_index

    return [(n, key_index(ts.key)) for n, ts in TABLES.items() if ts.indexed] + list(extra)


def check_key_indexes(lake: Lake, report: CheckReport, extra: Sequence[tuple[str, Any]] = ()) -> None:
    """Every stored key-index sidecar holds exactly the keys of its data file (a wrong one could hide a key from an
    append or from dedup; a missing one is fine: it is rebuilt when needed)."""
    from storage.keyindex import verify

    unreadable = {v.table for v in report.violations if v.invariant in ("table_unreadable", "commit_torn")}
    bad = [
        f"{name}/{index.folder}/{f}"
        for name, index in key_indexes(lake, extra)
        if name not in unreadable  # reported already; repair rebuilds its index
        for f in verify(lake, name, index, lake.delta(name))
    ]
    if bad:
        report.violations.append(Violation("key_index_mismatch", "indexes", len(bad), "key index file(s) disagree with their data file; "
                                           f"recover: `{repair_command(lake)}` (rebuilds them)", tuple(bad[:EXAMPLES])))  # fmt: skip
    report.checked.append("key_index_mismatch")


# ------------------------------------------------------------------------------------------------ entry point
def check_lake(
    lake: Lake,
    *,
    media: bool = True,
    progress: Callable[[str], None] | None = None,
    indexes: Sequence[tuple[str, Any]] = (),
) -> CheckReport:
    """Run every invariant over the lake; never raises for a violation (they are in the report). `indexes`: key
    indexes kept by the layers above (use `validators.lake_check.check_lake` for the whole flywheel lake)."""
    import duckdb

    from storage.pins import pinned_versions

    say = progress or (lambda what: None)
    forget_snapshots()
    report = CheckReport(str(lake.uri))
    say("commit logs")
    torn = check_commit_logs(lake, report)
    for name in TABLES:
        try:
            if name in torn:
                raise LakeError(f"its latest commit ({torn[name]}) is torn")
            report.stats[f"rows.{name}"] = lake.count(name)
        except (OSError, LakeError, pa.ArrowException) as e:  # a file deleted or overwritten: a finding, not a crash
            report.stats[f"rows.{name}"] = 0
            report.violations.append(
                Violation(
                    "table_unreadable",
                    name,
                    1,
                    f"table cannot be read; recover: `{repair_command(lake, name)}`",
                    (_one_line(e),),
                )  # fmt: skip
            )
    broken = {v.table for v in report.violations if v.invariant == "table_unreadable"}
    if "episodes" in broken:
        broken |= set(THIN)  # the pile views join episodes
    con = lake.duckdb(tables=[n for n in TABLES if n not in broken])  # the checks of a broken one fail: check_failed
    con.execute("SET enable_external_access = false")
    steps: list[tuple[str, Callable[[], None]]] = [
        ("table files and pins", lambda: check_table_files(lake, report, pinned_versions(lake))),
        ("duplicate keys", lambda: check_duplicates(lake, con, report)),
        ("piles", lambda: check_piles(lake, con, report)),
        ("rounds", lambda: check_rounds(lake, con, report)),
        ("key indexes", lambda: check_key_indexes(lake, report, indexes)),
    ]
    if media:
        steps.append(("media", lambda: check_media(lake, con, report)))
    for what, fn in steps:
        say(what)
        t0 = time.perf_counter()
        try:
            fn()
        except (OSError, LakeError, duckdb.Error) as e:  # a table that cannot be read: one more finding
            report.violations.append(Violation("check_failed", what, 1, f"could not check {what}", (_one_line(e),)))
        report.seconds[what] = round(time.perf_counter() - t0, 3)
    con.close()
    return report


def check_commit_logs(lake: Lake, report: CheckReport) -> dict[str, str]:
    """No empty or torn commit file at the end of any table's log (storage/health.py); returns {table: torn file}."""
    torn: dict[str, str] = {}
    for name in TABLES:
        found = commit_damage(lake, name)
        for code in ("commit_empty", "commit_torn"):
            hits = [d for d in found if d.code == code]
            if hits:
                what = "emptied (its rows are silently missing)" if code == "commit_empty" else "torn (cut off)"
                report.violations.append(Violation(code, name, len(hits), f"commit file(s) {what}; recover: "
                                                   f"`{repair_command(lake, name)}`", tuple(d.item for d in hits)))  # fmt: skip
        torn.update({d.table: d.item for d in found if d.code == "commit_torn"})
    report.checked += ["commit_empty", "commit_torn"]
    return torn


def _one_line(e: BaseException) -> str:
    import re

    return " ".join(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(e)).split())[:240]
