"""The validator registry and the routing policy (which validators V(s) requires for each source).

The policy is a YAML file: validators/routing_policy.yaml by default, `settings.routing_policy` to override.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from schemas.records import SOURCES
from validators.base import Validator
from validators.dedup import ExactDedup, NearDedup
from validators.judge import Judge
from validators.outcome import EnvVerdict, ReferenceAnswer
from validators.review import HumanReview
from validators.structural import STRUCTURAL

REGISTRY: dict[str, type[Validator]] = {
    cls.name: cls for cls in (*STRUCTURAL, EnvVerdict, ReferenceAnswer, Judge, ExactDedup, NearDedup, HumanReview)
}
DEFAULT_POLICY = Path(__file__).with_name("routing_policy.yaml")
DEFAULT_SOURCE = "default"


@dataclass(frozen=True)
class ValidatorSpec:
    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def build(self, context: Any = None) -> Validator:
        return REGISTRY[self.name](context=context, **dict(self.params))


@dataclass(frozen=True)
class Policy:
    sources: dict[str, tuple[ValidatorSpec, ...]]
    path: str = ""
    version: int = 1

    def for_source(self, source: str) -> tuple[ValidatorSpec, ...]:
        return self.sources.get(source, self.sources.get(DEFAULT_SOURCE, ()))

    def specs(self) -> list[ValidatorSpec]:
        """Every distinct validator configuration, in first-use order."""
        seen: dict[ValidatorSpec, None] = {}
        for specs in self.sources.values():
            for s in specs:
                seen.setdefault(s, None)
        return list(seen)


@dataclass
class ValidationContext:
    """What validators may need besides the episodes: the lake (object store for screenshots, piles for dedup)."""

    lake: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def _spec(entry: Any, where: str) -> ValidatorSpec:
    if isinstance(entry, str):
        name, params = entry, {}
    elif isinstance(entry, dict) and "name" in entry:
        params = {k: v for k, v in entry.items() if k != "name"}
        name = entry["name"]
    else:
        raise ValueError(f"{where}: a policy entry must be a validator name or {{name: ..., params}}, got {entry!r}")
    if name not in REGISTRY:
        raise ValueError(f"{where}: unknown validator {name!r}; known: {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    unknown = set(params) - set(cls.defaults)
    if unknown:
        raise ValueError(f"{where}: validator {name} has no parameter(s) {', '.join(sorted(unknown))}")
    return ValidatorSpec(name, tuple(sorted((k, _frozen(v)) for k, v in params.items())))


def _frozen(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def parse_policy(data: dict[str, Any], path: str = "<policy>") -> Policy:
    if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
        raise ValueError(f"{path}: a routing policy needs a `sources` mapping")
    sources: dict[str, tuple[ValidatorSpec, ...]] = {}
    for source, entries in data["sources"].items():
        if source not in SOURCES and source != DEFAULT_SOURCE:
            raise ValueError(f"{path}: unknown source {source!r}; sources: {', '.join(SOURCES)}, {DEFAULT_SOURCE}")
        if not entries:
            raise ValueError(f"{path}: source {source!r} requires no validator; V(s) would pass everything")
        specs = tuple(_spec(e, f"{path}: {source}") for e in entries)
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"{path}: source {source!r} lists a validator twice")
        sources[source] = specs
    missing = [s for s in SOURCES if s not in sources]
    if missing and DEFAULT_SOURCE not in sources:
        raise ValueError(f"{path}: no validators for source(s) {', '.join(missing)} and no `default`")
    return Policy(sources, path, int(data.get("version", 1)))


def load_policy(path: str | Path | None = None) -> Policy:
    """The routing policy from `path`, else settings.routing_policy, else the bundled default."""
    if path is None:
        from core.settings import get_settings

        path = get_settings().routing_policy or DEFAULT_POLICY
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"routing policy {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"routing policy {p} is not valid YAML: {e}") from None
    return parse_policy(data, str(p))
