"""Text from inputs is printed as text, never as Rich markup: a zip member, file name, quarantine message, SQL value
or column holding `[/x]` neither ends a command (MarkupError) nor styles or links its output."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.markup import render
from rich.text import Text

from tests.hostile.fuzz_targets import PARTS, annotation_doc, write_parts, zip_folder

HOSTILE = "[/x] [red]red[/red] [link=https://evil.example]here[/link] :warning: \\"
MARKUPISH = st.text(alphabet=st.sampled_from(list("[]/\\=:abx #@!link")), max_size=40) | st.text(max_size=40)


@settings(max_examples=2000)
@given(MARKUPISH)
def test_escaped_text_prints_as_itself(s: str) -> None:
    from core.console import data_table, esc

    assert (
        render(f"[bold]{esc(s)}[/] [green]{esc(s)}[/]", emoji=False).plain == Text(f"{s} {s}").plain
    )  # the text, exactly
    t = Console(file=io.StringIO(), width=500, emoji=False, color_system=None)
    t.print(data_table([s or "c"], [[s]]))  # headers and cells alike


def _cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flywheel", *args], capture_output=True, text=True, input=input,
                          env={**os.environ, "COLUMNS": "250", "TERM": "xterm-256color"}, timeout=300)  # fmt: skip


def _plain(r: subprocess.CompletedProcess) -> str:
    out = r.stdout + r.stderr
    assert "MarkupError" not in out and "Traceback" not in out, out
    assert "\x1b]8;" not in out, out  # no hyperlink escape: [link=...] was not obeyed
    return out


def test_ingest_sessions_and_sql_print_hostile_text(lake, tmp_path: Path) -> None:
    root = str(lake.uri.root)
    # a good bundle, and a zip beside it with a member named like closing markup
    inputs = tmp_path / "in"
    good = write_parts(inputs / "good", PARTS)
    src = write_parts(tmp_path / "src", {**PARTS, "manifest": {**PARTS["manifest"], "session_id": "evil"}})
    buf = io.BytesIO(zip_folder(src))
    with zipfile.ZipFile(buf, "a") as z:
        z.writestr("[/x]/../../evil.txt", b"x")
    (inputs / "[red]evil[link=x].zip").write_bytes(buf.getvalue())
    assert good.exists()
    for _ in range(2):  # and on a re-run
        r = _cli("ingest", "think-aloud", str(inputs), "--lake", root)
        out = _plain(r)
        assert r.returncode == 0, out
        assert "[red]evil[link=x].zip" in out and "[/x]/../../evil.txt" in out
    assert lake.count("episodes") == 1

    ann = tmp_path / "ann"
    ann.mkdir()
    doc = annotation_doc()
    doc["episodes"][0]["steps"][0]["override"]["action"] = "[/x]"  # quarantined: bad_action, its message printed
    (ann / "a[b]c [red].json").write_text(json.dumps(doc))
    ok = annotation_doc()
    ok["session_id"] = "[/x]-session"
    (ann / "z.json").write_text(json.dumps(ok))
    r = _cli("ingest", "annotations", str(ann), "--lake", root)
    out = _plain(r)
    assert r.returncode == 0 and "a[b]c [red].json" in out and "z.json" in out and "bad_action" in out, out

    r = _cli("sessions", "--lake", root)
    out = _plain(r)
    assert r.returncode == 0 and "[/x]" in out, out

    r = _cli("sql", f"SELECT '{HOSTILE}' AS \"[/c]\"", "--lake", root)
    out = _plain(r)
    assert r.returncode == 0 and "[/x] [red]red[/red]" in out and "[/c]" in out and ":warning:" in out, out

    r = _cli(
        "shell", "--lake", root, input=f"SELECT '[/x]' AS v;\nSELECT '{HOSTILE}' AS w;\nSELECT 41 + 1 AS answer;\n"
    )
    out = _plain(r)
    assert r.returncode == 0 and "42" in out and "[link=https://evil.example]" in out, out
