"""A MiniWoB++ task in headless Chromium behind the sandbox's environment API (sandbox/env.py, docs/sandbox.md).

    env = MiniwobEnv(TaskSpec("click-button", 7))   # starts a browser (about 2 s); or MiniwobEnv(spec, browser=b)
    obs = env.reset()                               # Observation(text, step, width, height, screenshot)
    r = env.step("click(point='<point>23 73</point>')")   # StepResult(observation, reward, done, info)
    v = env.verify()                                # Verdict(passed, reason, score, details: raw_reward, ...)
    env.reset(TaskSpec("enter-text", 3))            # the next episode, any task, same browser
    env.close()

Episodes end when the page ends them (MiniWoB decides success: ``raw_reward > 0``; outcome ``ended``), on
``finished(...)`` (outcome ``finished``; a page that has not ended yet fails with ``not_done``), at the task's
step limit (``step_limit``), on an unreadable or off-screen action (``unreadable_action``, reward -1, as in the
sandbox), when MiniWoB's own timer runs out (``timed_out``; ``time_limit_s``, 10 s in MiniWoB, raise it for slow
policies), or when the browser dies (``env_error``: the episode is lost but reported; the next reset starts a
new browser). Rewards: +1 at the end of a passing episode, 0 failing, -1 unreadable: the sandbox's rule. The
page's own rewards are kept: ``info``/``details`` ``raw_reward`` (MiniWoB's, in [-1, 1]) and ``env_reward``
(discounted by time, as MiniWoB reports it), and ``miniwob_reason``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sandbox.env import Observation, StepResult
from sandbox.miniwob.actions import UnsupportedKey, perform
from sandbox.miniwob.browser import BrowserDied, start_browser
from sandbox.miniwob.observe import Element, screenshot_png, snapshot
from sandbox.miniwob.tasks import TASK_HEIGHT, TASK_WIDTH, TaskSpec, to_task
from sandbox.tasks import Task
from schemas.actions import Action, ActionError, check_on_screen, parse_action
from schemas.records import Verdict


def _browser_errors() -> tuple[type[BaseException], ...]:
    from selenium.common.exceptions import WebDriverException
    from urllib3.exceptions import HTTPError

    return (WebDriverException, HTTPError, ConnectionError, BrowserDied, OSError)


class MiniwobEnv:
    """One MiniWoB++ episode at a time in one browser (owned, or lent by a pool)."""

    def __init__(
        self,
        spec: TaskSpec,
        screenshots: bool = True,
        browser: Any = None,
        proxy_port: int | None = None,
        time_limit_s: float = 10.0,
        scale: int = 1,
        reset: bool = True,
    ) -> None:
        self.spec = spec
        self.screenshots = screenshots
        self.proxy_port = proxy_port
        self.time_limit_s = time_limit_s
        self.scale = scale
        self.width, self.height = TASK_WIDTH * scale, TASK_HEIGHT * scale
        self._own_browser = browser is None
        self.browser = browser
        self.browser_dead = False
        self.restarts = 0
        self.done = True
        self.outcome: str | None = None
        self.answer: str | None = None
        self.n_steps = 0
        self.task: Task | None = None
        self.utterance = ""
        self.fields: tuple[tuple[str, str], ...] = ()
        self.elements: list[Element] = []
        self._obs: Observation | None = None
        self._verdict: Verdict | None = None
        if reset:
            self.reset()

    # ---- browser ------------------------------------------------------------------------------------------------

    def _ensure_browser(self) -> None:
        if self.browser is not None and not self.browser_dead:
            return
        if self.browser is not None:
            self.browser.quit()
            self.restarts += 1
        self.browser = start_browser(self.spec.name, self.proxy_port)
        self.browser_dead = False

    def close(self) -> None:
        if self.browser is not None and self._own_browser:
            self.browser.quit()
            self.browser = None

    def __enter__(self) -> MiniwobEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- API ----------------------------------------------------------------------------------------------------

    def reset(self, spec: TaskSpec | None = None) -> Observation:
        """Start an episode of `spec` (default: the current one). Raises BrowserDied if no browser can start or
        the page will not load (a pool records that as a failed attempt)."""
        if spec is not None:
            self.spec = spec
        self._ensure_browser()
        b = self.browser
        try:
            b.load(self.spec.name)
            b.start_episode(self.spec.seed, self.time_limit_s)
            resp = b.driver.execute_script("return core.getUtterance();")
            self.utterance = resp["utterance"] if isinstance(resp, dict) else str(resp)
            self.fields = (
                tuple(resp["fields"].items()) if isinstance(resp, dict) else tuple(b.field_extractor(self.utterance))
            )
        except _browser_errors() as e:
            self.browser_dead = True
            raise BrowserDied(
                f"{self.spec.task_id}: reset failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ) from e
        self.task = to_task(self.spec, self.utterance, self.scale)
        self.n_steps, self.done, self.outcome, self.answer, self._verdict = 0, False, None, None, None
        self._obs = self._observe()
        return self._obs

    @property
    def max_steps(self) -> int:
        return self.spec.max_steps

    def observation(self) -> Observation:
        assert self._obs is not None, "call reset() first"
        return self._obs

    def screenshot(self) -> bytes:
        b = self.browser
        return screenshot_png(b.driver, b.inner_width, b.inner_height, TASK_WIDTH, TASK_HEIGHT, self.scale)

    def _observe(self) -> Observation:
        text, self.elements = snapshot(self.browser.driver, self.spec.name, self.width, self.height, self.scale)
        png = self.screenshot() if self.screenshots else None
        return Observation(text, self.n_steps, self.width, self.height, png)

    def _end(self, outcome: str, info: dict[str, Any], verdict: Verdict, reward: float | None = None) -> StepResult:
        self.done, self.outcome, self._verdict = True, outcome, verdict
        if reward is None:
            reward = float(verdict.passed)
        info.update(outcome=outcome, passed=verdict.passed, reason=verdict.reason)
        for k in ("raw_reward", "env_reward", "miniwob_reason"):
            if verdict.details and k in verdict.details:
                info[k] = verdict.details[k]
        if not self.browser_dead:
            with contextlib.suppress(*_browser_errors()):
                self._obs = self._observe()
        assert self._obs is not None
        self._obs = Observation(self._obs.text, self.n_steps, self.width, self.height, self._obs.screenshot)
        return StepResult(self._obs, reward, True, info)

    def _page_verdict(self, meta: dict[str, Any]) -> Verdict:
        raw, env_r, why = float(meta.get("raw_reward") or 0.0), float(meta.get("env_reward") or 0.0), meta.get("reason")
        d = {"raw_reward": raw, "env_reward": env_r, "miniwob_reason": None if why is None else str(why)}
        if raw > 0:
            return Verdict.ok(raw, **d)
        reason = "timed_out" if why == "timed out" else "task_failed"
        return Verdict.fail(reason, raw, message=f"MiniWoB reward {raw:g}" + (f" ({why})" if why else ""), **d)

    def step(self, action: str) -> StepResult:
        """Apply one action string as real input events. Never raises: bad input and a dead browser end the
        episode with a reason (see the module docstring)."""
        if self.done:
            assert self._obs is not None
            return StepResult(
                self._obs, 0.0, True, {"error": "the episode is over; call reset()", "outcome": self.outcome}
            )
        self.n_steps += 1
        info: dict[str, Any] = {"step": self.n_steps, "error": None}
        try:
            a: Action = parse_action(action)
        except ActionError as e:
            info["error"] = f"unreadable action: {e}"
            return self._end("unreadable_action", info, Verdict.fail("unreadable_action", -1.0, message=str(e)), -1.0)
        try:
            check_on_screen(a, self.width, self.height)
        except ActionError as e:
            info["error"] = f"off-screen action: {e}"
            return self._end("unreadable_action", info, Verdict.fail("off_screen_action", -1.0, message=str(e)), -1.0)
        try:
            meta = self.browser.metadata()
            if not meta["done"]:  # the page's own timer may have ended it while the policy was thinking
                if a.kind == "finished":
                    self.answer = a.text
                    info["effect"] = "finished"
                    return self._end(
                        "finished", info, Verdict.fail("not_done", 0.0, message="finished before the task ended")
                    )
                try:
                    info["effect"] = perform(self.browser.driver, a, self.scale)
                except UnsupportedKey as e:
                    info["error"] = str(e)
                    info["effect"] = "nothing (unsupported key)"
                meta = self.browser.metadata()
            if meta["done"]:
                if a.kind == "finished":
                    self.answer = a.text
                return self._end("ended", info, self._page_verdict(meta))
            if self.n_steps >= self.max_steps:
                return self._end(
                    "step_limit", info, Verdict.fail("step_limit", 0.0, message=f"step limit {self.max_steps} reached")
                )
            self._obs = self._observe()
        except _browser_errors() as e:
            self.browser_dead = True
            msg = f"browser died: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            info["error"] = msg
            return self._end("env_error", info, Verdict.fail("env_error", 0.0, message=msg))
        return StepResult(self._obs, 0.0, False, info)

    def verify(self) -> Verdict:
        """Pass or fail for the current state (normally the final one), with MiniWoB's raw reward in details."""
        if self._verdict is not None:
            return self._verdict
        return Verdict.fail("not_done", 0.0, message="the episode has not ended")
