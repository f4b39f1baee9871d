"""The top level follows DESIGN.md, and no installed PyPI distribution shadows one of our packages.

`validators`, `flows`, `schemas`... are also names of real PyPI projects. If one of them were installed, `import
validators` could silently load it instead of ours (depending on sys.path order), so we check every installed
distribution's top-level modules (top_level.txt, else its RECORD) and the site-packages folders themselves.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "core",
    "flywheel",
    "schemas",
    "ingest",
    "validators",
    "storage",
    "training",
    "sandbox",
    "flows",
    "dashboards",
)


def _is_ours(dist: md.Distribution) -> bool:
    """Our own install: the editable one (direct_url.json points at this repository) or the build metadata
    next to the sources (flywheel.egg-info in the repository root)."""
    if dist.metadata["Name"] != "flywheel":
        return False
    raw = dist.read_text("direct_url.json")
    url = json.loads(raw).get("url", "") if raw else ""
    if url.startswith("file://") and Path(url[7:]).resolve() == ROOT:
        return True
    return Path(str(dist.locate_file(""))).resolve() == ROOT


def top_level_names(dist: md.Distribution) -> set[str]:
    """Importable top-level names a distribution installs."""
    declared = dist.read_text("top_level.txt")
    names = {ln.strip() for ln in (declared or "").splitlines() if ln.strip()}
    for f in dist.files or []:
        parts = f.parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith((".dist-info", ".egg-info", ".data")):
            continue
        if len(parts) == 1:
            name = parts[0]
            for suffix in (".py", ".pyc"):
                if name.endswith(suffix):
                    names.add(name[: -len(suffix)])
            if ".cpython-" in name or name.endswith((".so", ".pyd")):
                names.add(name.split(".")[0])
        else:
            names.add(parts[0])
    return names


def test_no_installed_distribution_provides_our_packages() -> None:
    clashes = {}
    scanned = 0
    for dist in md.distributions():
        scanned += 1
        if _is_ours(dist):
            continue
        hit = top_level_names(dist) & set(PACKAGES)
        if hit:
            clashes[dist.metadata["Name"]] = sorted(hit)
    assert scanned > 50  # the scan saw the environment (torch, prefect, deltalake, ...)
    assert not clashes, f"installed distributions shadow our packages: {clashes}; uninstall them"


def test_the_scan_would_see_a_clash() -> None:
    """The detector itself works: known distributions report their real top-level modules."""
    assert "deltalake" in top_level_names(md.distribution("deltalake"))
    assert "yaml" in top_level_names(md.distribution("PyYAML"))


def test_no_stray_module_in_site_packages() -> None:
    dirs = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()] if Path(p).is_dir()]
    stray = [str(d / n) for d in dirs for n in PACKAGES for cand in (d / n, d / f"{n}.py") if cand.exists()]
    assert not stray, stray


def test_our_packages_import_from_the_repository_from_anywhere(tmp_path: Path) -> None:
    """Run from an unrelated folder so that only the installed (editable) mapping can find them."""
    code = "import importlib, json; print(json.dumps({p: importlib.import_module(p).__file__ for p in %r}))" % (
        PACKAGES,
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    files = json.loads(out.stdout.strip().splitlines()[-1])
    for pkg, f in files.items():
        assert Path(f).resolve() == ROOT / pkg / "__init__.py", (pkg, f)
