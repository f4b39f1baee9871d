"""Storage damage that a crash, a power cut or a hand edit can leave, found without trusting delta-rs to open the
table: an emptied or torn commit file at the end of a table's `_delta_log` (delta-rs reads an empty one as a commit
with no actions and silently drops its rows; a torn one fails every command), and data files of the current
snapshot that are missing or not Parquet. `flywheel check` reports them, `flywheel maintain` refuses to vacuum
while any is present (vacuum would delete the only copy of a dropped commit's files), and `storage.repair` fixes
them. Each finding names its table and the command that repairs it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa

from schemas.tables import TABLES
from storage.delta import delta_errors
from storage.errors import LakeError
from storage.lake import Lake

_COMMIT = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True)
class Damage:
    code: str  # commit_empty | commit_torn | data_file_missing | data_file_unreadable | table_unreadable
    table: str
    item: str  # the commit or data file (relative to the table's folder), or the error
    detail: str = ""


def repair_command(lake: Lake, table: str | None = None) -> str:
    return f"flywheel repair --lake {lake.uri}" + (f" --table {table}" if table else "")


def _log(lake: Lake, table: str) -> str:
    return f"tables/{table}/_delta_log/"


def last_checkpoint(lake: Lake, table: str) -> int:
    """The version of the table's last checkpoint (-1: none); commits up to it are not replayed."""
    raw = lake.objects.get_text(_log(lake, table) + "_last_checkpoint")
    try:
        return int(json.loads(raw)["version"]) if raw else -1
    except (ValueError, KeyError, TypeError):
        return -1


def commit_files(lake: Lake, table: str) -> list[tuple[int, str]]:
    """(version, object key) of every commit file, in version order."""
    out = []
    for rel in lake.objects.list(_log(lake, table)):
        m = _COMMIT.match(rel.rsplit("/", 1)[-1])
        if m:
            out.append((int(m.group(1)), rel))
    return sorted(out)


def commit_damage(lake: Lake, table: str) -> list[Damage]:
    """Empty or torn (a line that is not JSON) commit files after the last checkpoint."""
    cp = last_checkpoint(lake, table)
    out = []
    for version, rel in commit_files(lake, table):
        if version <= cp:
            continue
        data = lake.objects.get_bytes(rel) or b""
        name = rel.rsplit("/", 1)[-1]
        if not data.strip():
            out.append(Damage("commit_empty", table, name, f"commit {version} is empty: its rows are not in the table"))
            continue
        for i, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except (ValueError, UnicodeDecodeError):
                out.append(Damage("commit_torn", table, name, f"commit {version} is cut off at line {i}"))
                break
    return out


def file_damage(lake: Lake, table: str) -> list[Damage]:
    """Data files of the current snapshot that are missing or whose Parquet footer cannot be read (one footer read
    per file, local or S3; the dataset is built afresh, as a cached one remembers footers of deleted files)."""
    try:
        dt = lake.delta(table)
        with delta_errors(f"listing the files of {table}"):
            frags = list(dt.to_pyarrow_dataset().get_fragments())
    except LakeError as e:
        return [Damage("table_unreadable", table, str(e)[:240])]
    out = []
    for f in frags:
        try:
            f.ensure_complete_metadata()
        except FileNotFoundError:
            out.append(Damage("data_file_missing", table, unquote(f.path)))
        except (OSError, pa.ArrowException) as e:
            missing = not isinstance(e, pa.ArrowInvalid) and ("not found" in str(e) or "No such file" in str(e))
            out.append(Damage("data_file_missing" if missing else "data_file_unreadable", table, unquote(f.path),
                              " ".join(str(e).split())[:160]))  # fmt: skip
    return out


def damage(lake: Lake, tables: list[str] | None = None, *, files: bool = True) -> list[Damage]:
    """Every commit-log problem, then (unless files=False) every missing or unreadable data file."""
    out: list[Damage] = []
    for name in tables or list(TABLES):
        found = commit_damage(lake, name)
        out += found
        if files and not any(d.code == "commit_torn" for d in found):  # a torn log cannot be opened
            out += file_damage(lake, name)
    return out
