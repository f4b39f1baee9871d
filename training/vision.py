"""What a vision-language policy sees and writes: the screenshot resized to the model's image, the prompt with that
image in it, and the mapping of actions' pixel coordinates between the screen and the model's image.

Why one module: the in-process VLM (training/vlm.py), its training examples (pile steps with screenshots) and a
served VLM's client (training/served.py) must build the same tokens from the same screen, or a checkpoint trained
here would act differently behind a server. Nothing here needs the model's weights.

The coordinate convention (`View`, recorded in every VLM checkpoint's flywheel_policy.json and in its
training_runs config): every screenshot, whatever its size W x H, is resized (bicubic, aspect not kept) to the
model's `width` x `height`. With coords = "image" the model reads and writes pixels of that image:
x_image = floor(x * width / W), and back x = floor((x_image + 1/2) * W / width), the centre of the screen pixels
that image pixel covers (so a round trip moves a point by at most W / width / 2). With coords = "screen" the model
writes the original screen's pixels (the image is still resized). The lake and the environments always hold
screen pixels: only the model's own text is in its convention.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from schemas.actions import ActionError, format_action, parse_action
from schemas.prompt import PromptConfig, Turn, render_answer, render_prompt
from training.prompt import Encoded

IMAGE_START, IMAGE_PAD, IMAGE_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"
#: Where a prompt's screenshot goes; its one IMAGE_PAD becomes `View.tokens` image tokens once tokenized.
IMAGE = IMAGE_START + IMAGE_PAD + IMAGE_END
#: The chat template a VLM checkpoint's tokenizer carries: the messages' text and image parts in order, nothing
#: added, so a server applying it (`flywheel policy serve`, or vLLM with the checkpoint) sees the prompt the policy was
#: trained on. `chat_prompt` is the same function in Python.
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% else %}" + IMAGE + "{% endif %}"
    "{% endfor %}{% endif %}{% endfor %}"
)
COORDS = ("image", "screen")


@dataclass(frozen=True)
class View:
    """How a VLM sees a screen: the image size, where its coordinates live, and its image tokens."""

    width: int
    height: int
    coords: str = "image"
    patch: int = 14
    merge: int = 2

    def __post_init__(self) -> None:
        f = self.patch * self.merge
        if self.coords not in COORDS:
            raise ValueError(f"coords must be one of {', '.join(COORDS)}, not {self.coords!r}")
        if self.width % f or self.height % f or self.width <= 0 or self.height <= 0:
            raise ValueError(f"the model's image {self.width}x{self.height} must be positive multiples of {f} "
                             "(patch_size x merge_size)")  # fmt: skip

    @property
    def tokens(self) -> int:
        """Image tokens per screenshot."""
        f = self.patch * self.merge
        return (self.width // f) * (self.height // f)

    def fit(self, png: bytes) -> tuple[bytes, tuple[int, int]]:
        """The screenshot as the model sees it (RGB PNG at width x height; returned as given when it already is)
        and the original screen size."""
        from PIL import Image

        im = Image.open(io.BytesIO(png))
        size = im.size
        if size == (self.width, self.height) and im.mode == "RGB":
            return png, size
        buf = io.BytesIO()
        im.convert("RGB").resize((self.width, self.height), Image.Resampling.BICUBIC).save(buf, format="PNG")
        return buf.getvalue(), size

    def _map(self, action: str, fx: Callable[[int], int], fy: Callable[[int], int]) -> str:
        try:
            a = parse_action(action)
        except ActionError:
            return action  # unreadable stays as written: the rollout ends on it either way
        if a.x is None:
            return action
        kw: dict[str, Any] = {"x": fx(a.x), "y": fy(a.y)}  # type: ignore[arg-type]
        if a.x2 is not None:
            kw |= {"x2": fx(a.x2), "y2": fy(a.y2)}  # type: ignore[arg-type]
        return format_action(replace(a, **kw))

    def to_model(self, action: str, screen: tuple[int, int]) -> str:
        """A screen-pixel action in the model's coordinates."""
        if self.coords == "screen":
            return action
        W, H = screen
        return self._map(action, lambda x: min(self.width - 1, x * self.width // W),
                         lambda y: min(self.height - 1, y * self.height // H))  # fmt: skip

    def to_screen(self, action: str, screen: tuple[int, int]) -> str:
        """An action the model wrote, in screen pixels (coordinates beyond the image stay beyond the screen)."""
        if self.coords == "screen":
            return action
        W, H = screen
        return self._map(action, lambda x: (2 * x + 1) * W // (2 * self.width),
                         lambda y: (2 * y + 1) * H // (2 * self.height))  # fmt: skip

    def as_dict(self, screens: Sequence[tuple[int, int]] = ()) -> dict[str, Any]:
        """The convention as recorded with a checkpoint and a training run (`screens`: the sizes seen)."""
        d: dict[str, Any] = asdict(self) | {"resample": "bicubic", "image_tokens": self.tokens}
        if self.coords == "image":
            d["to_image"] = f"x' = floor(x * {self.width} / W), y' = floor(y * {self.height} / H)"
            d["to_screen"] = f"x = floor((x' + 0.5) * W / {self.width}), y = floor((y' + 0.5) * H / {self.height})"
        else:
            d["to_image"] = d["to_screen"] = "identity (the model writes screen pixels)"
        if screens:
            d["screens"] = {f"{w}x{h}": [self.width, self.height] for w, h in sorted(set(screens))}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> View:
        return cls(int(d["width"]), int(d["height"]), str(d.get("coords", "image")), int(d.get("patch", 14)),
                   int(d.get("merge", 2)))  # fmt: skip


@dataclass(frozen=True)
class VisionPrompt:
    """A prompt with its screenshot. It iterates as its token ids wherever a prompt's ids are expected."""

    ids: tuple[int, ...]  # the image's one placeholder expanded to View.tokens image tokens
    image: bytes  # the screenshot at the model's size (PNG)
    text: str  # the prompt's text with IMAGE where the screenshot goes: what a chat request sends, split at IMAGE
    screen: tuple[int, int]  # the original screen size the action's coordinates map back to

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)


def expand_image(ids: Sequence[int], pad_id: int, n: int) -> list[int]:
    """Token ids with each image placeholder token repeated to the image's `n` tokens (what Qwen2-VL's processor
    does with the text)."""
    out: list[int] = []
    for t in ids:
        out += [t] * n if t == pad_id else [t]
    return out


def encode_vision_text(tokenizer: Any, view: View, text: str) -> list[int]:
    """A prompt text holding IMAGE placeholders -> its token ids (the image tokens expanded)."""
    return expand_image(tokenizer.encode(text, add_special_tokens=False), tokenizer.convert_tokens_to_ids(IMAGE_PAD),
                        view.tokens)  # fmt: skip


def vision_prompt(tokenizer: Any, view: View, instruction: str, history: Sequence[Turn], screenshot: bytes,
                  cfg: PromptConfig = PromptConfig()) -> VisionPrompt:  # fmt: skip
    """The report's prompt with the screenshot in place of the text screen: the instruction, the past actions (in
    the model's coordinates; no past screens) and the current screenshot. Over `max_prompt_tokens`, the oldest past
    actions are dropped whole (the text stays exactly what the ids encode, so a chat request can carry it)."""
    image, screen = view.fit(screenshot)
    turns = [Turn(None, t.thought, view.to_model(t.action, screen)) for t in history]
    k = cfg.history_max
    while True:
        text = render_prompt(instruction, turns, IMAGE, replace(cfg, history_max=k))
        ids = encode_vision_text(tokenizer, view, text)
        if len(ids) <= cfg.max_prompt_tokens or k <= 0 or not turns:
            return VisionPrompt(tuple(ids), image, text, screen)
        k = min(k, len(turns)) - 1


def chat_prompt(messages: Sequence[dict[str, Any]]) -> tuple[str, list[str]]:
    """CHAT_TEMPLATE in Python: (the prompt text with IMAGE for each image part, each image part's URL in order)."""
    text, urls = [], []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            text.append(content)
            continue
        for p in content or []:
            if p.get("type") == "text":
                text.append(str(p.get("text", "")))
            elif p.get("type") == "image_url":
                text.append(IMAGE)
                urls.append(str((p.get("image_url") or {}).get("url", "")))
            else:
                raise ValueError(f"unsupported content part type {p.get('type')!r} (text and image_url are)")
    return "".join(text), urls


def chat_content(prompt: VisionPrompt) -> list[dict[str, Any]]:
    """The prompt as one user message's content: its text parts and the screenshot as a PNG data URL."""
    import base64

    before, _, after = prompt.text.partition(IMAGE)
    url = "data:image/png;base64," + base64.b64encode(prompt.image).decode()
    parts: list[dict[str, Any]] = [{"type": "text", "text": before}] if before else []
    parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts + ([{"type": "text", "text": after}] if after else [])


def data_url_bytes(url: str) -> bytes:
    """The bytes of a base64 `data:` URL (the only image source a server here reads: it fetches nothing)."""
    import base64
    import binascii

    head, sep, body = url.partition(",")
    if not (url.startswith("data:") and sep and head.endswith(";base64")):
        raise ValueError("images must be base64 data URLs (data:image/png;base64,...)")
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"the image's data URL is not base64: {e}") from None


# ------------------------------------------------------------------------------------------ training examples
@dataclass(frozen=True)
class VisionEncoded(Encoded):
    """A training example of a VLM: prompt + answer ids, the agent mask, and the screenshot (model-sized PNG)."""

    image: bytes = b""


def vision_examples(tokenizer: Any, view: View, rows: Sequence[dict], load: Callable[[str], bytes],
                    cfg: PromptConfig = PromptConfig()) -> tuple[list[VisionEncoded], dict[str, Any]]:  # fmt: skip
    """Every step of `rows` (episodes with steps' thought, action and screenshot_uri) as a VLM example: the prompt
    over its screenshot (`load(uri)` reads it from the object store), the answer with the action in the model's
    coordinates. A step whose screenshot is missing or unreadable is skipped and counted, never fatal: the rest of
    the episode still trains. Returns the examples and {steps, without_screenshot, screens}."""
    eos = tokenizer.eos_token_id
    out: list[VisionEncoded] = []
    missing = 0
    screens: set[tuple[int, int]] = set()
    for row in rows:
        history: list[Turn] = []
        for s in row["steps"] or []:
            thought, action = s.get("thought") or "", (s.get("action") or "").strip()
            try:
                p = vision_prompt(tokenizer, view, row["instruction"], history, load(s["screenshot_uri"]), cfg)
            except Exception:  # noqa: BLE001 - no URI, a missing object or not an image: this step cannot be shown
                missing += 1
                p = None
            history.append(Turn(None, thought, action))
            if p is None:
                continue
            screens.add(p.screen)
            answer = render_answer(thought, view.to_model(action, p.screen), cfg, None, row["instruction"])
            a = tokenizer.encode(answer, add_special_tokens=False) + [eos]
            out.append(VisionEncoded(list(p.ids) + a, [0] * len(p.ids) + [1] * len(a), p.image))
    return out, {"steps": len(out), "without_screenshot": missing, "screens": sorted(screens)}
