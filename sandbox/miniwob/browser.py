"""One headless Chromium showing MiniWoB++ task pages, started offline and locked to the loopback interface.

miniwob's SeleniumInstance owns the page protocol (seeding, starting an episode, the reward globals); this
module adds what a long-running rollout pool needs around it:

- offline start: MINIWOB_CHROME_BINARY / MINIWOB_CHROMEDRIVER default to Debian's chromium and chromedriver
  (otherwise Selenium Manager tries the internet first, see STACK.md);
- extra Chromium flags (no background networking, component updates, sync, first-run, /dev/shm; background
  services that call home anyway are disabled or pointed at a closed loopback port), added by
  wrapping the ChromeOptions class that miniwob.selenium_instance instantiates (miniwob hard-codes only
  headless, disable-gpu and no-sandbox);
- a network lock: every request Chromium would send to a non-loopback host goes to a proxy on 127.0.0.1
  (``proxy_port``: sandbox.miniwob.netguard records and refuses it), and host names do not resolve;
- switching task pages in the same browser (a browser start costs about 2 s, a page load about 0.1 s);
- the process ids (chromedriver and its Chromium tree), so a crash can be detected and nothing is left behind;
- browsers of a process that died without closing them (kill -9 of a round, which `flywheel round resume` then
  finishes) are reaped when the next browser starts: every browser's processes carry their owner's pid in
  FLYWHEEL_BROWSER_OWNER, and chromedriver outlives its parent otherwise, with its Chromium, for good.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import types
from typing import Any

import psutil

DEFAULT_CHROME = "/usr/bin/chromium"
COMMAND_TIMEOUT_S = 30
DEFAULT_CHROMEDRIVER = "/usr/bin/chromedriver"

#: Flags added to miniwob's own (headless, disable-gpu, no-sandbox).
EXTRA_FLAGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    # background services that still call home with the flags above (seen through netguard on Chromium 156)
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,OptimizationGuideModelDownloading,"
    "OptimizationHintsFetching,MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
    "--component-updater=url-source=http://127.0.0.1:9/",  # component update checks: a closed loopback port
    "--gaia-url=http://127.0.0.1:9/",  # Google account (GAIA) requests: likewise
)

#: Profile preferences: the spell checker downloads a Hunspell dictionary (redirector.gvt1.com/edgedl/chrome/dict/)
#: the first time a text box is typed into, even with spell checking off, unless the dictionary is blocked.
PREFS = {
    "browser.enable_spellchecking": False,
    "spellcheck.dictionaries": [],
    "spellcheck.dictionary": "",
    "spellcheck.blocked_dictionaries": ["en-US", "en"],
    "spellcheck.use_spelling_service": False,
}

_local = threading.local()  # per-thread flags for the ChromeOptions being built (pools start browsers in threads)


#: The environment variable naming the process that started a browser (inherited by chromedriver and Chromium).
OWNER_VAR = "FLYWHEEL_BROWSER_OWNER"


def configure_offline() -> None:
    """Point miniwob at the local Chromium and chromedriver unless the caller chose others."""
    chrome = os.environ.get("MINIWOB_CHROME_BINARY") or (shutil.which("chromium") or DEFAULT_CHROME)
    driver = os.environ.get("MINIWOB_CHROMEDRIVER") or (shutil.which("chromedriver") or DEFAULT_CHROMEDRIVER)
    os.environ["MINIWOB_CHROME_BINARY"] = chrome
    os.environ["MINIWOB_CHROMEDRIVER"] = driver
    os.environ.setdefault("SE_AVOID_STATS", "true")  # Selenium Manager telemetry off, should it ever run
    os.environ[OWNER_VAR] = str(os.getpid())  # this process's browsers (a child process names itself, not its parent)


def reap_orphans() -> int:
    """Kill the browser processes (chromedriver, Chromium and its helpers) whose owner process is gone; return how
    many. Only processes that carry OWNER_VAR are looked at, and only those whose owner no longer runs are killed,
    so the browsers of other live processes, flywheel's or anyone's, are never touched."""
    me = psutil.Process()
    dead = []
    for p in psutil.process_iter(["name"]):
        name = (p.info.get("name") or "").lower()
        if "chrom" not in name or p.pid == me.pid:
            continue
        try:
            owner = p.environ().get(OWNER_VAR)
        except (psutil.Error, OSError):
            continue
        if owner and owner.isdigit() and not psutil.pid_exists(int(owner)):
            dead.append(p)
    for p in dead:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(dead, timeout=5)
    return len(dead)


def chromium_available() -> bool:
    configure_offline()
    return all(os.path.exists(os.environ[k]) for k in ("MINIWOB_CHROME_BINARY", "MINIWOB_CHROMEDRIVER"))


def _install_options_wrapper() -> None:
    """Replace the `webdriver` name inside miniwob.selenium_instance (only there) with a view of selenium's
    webdriver module whose ChromeOptions adds our flags."""
    import miniwob.selenium_instance as si
    from selenium import webdriver

    if getattr(si.webdriver, "_flywheel_wrapped", False):
        return

    class ChromeOptions(webdriver.ChromeOptions):
        def __init__(self) -> None:
            super().__init__()
            for flag in (*EXTRA_FLAGS, *getattr(_local, "flags", ())):
                self.add_argument(flag)
            self.add_experimental_option("prefs", PREFS)

    shim = types.ModuleType("selenium.webdriver (flywheel)")
    shim.__dict__.update({k: getattr(webdriver, k) for k in dir(webdriver) if not k.startswith("__")})
    shim.ChromeOptions = ChromeOptions  # type: ignore[attr-defined]
    shim._flywheel_wrapped = True  # type: ignore[attr-defined]
    si.webdriver = shim  # type: ignore[assignment]


def network_flags(proxy_port: int | None) -> tuple[str, ...]:
    """Send every non-loopback request to 127.0.0.1:proxy_port and make host names unresolvable."""
    if proxy_port is None:
        return ()
    return (
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    )


class BrowserDied(RuntimeError):
    """The browser (Chromium or chromedriver) stopped answering; the episode in it is lost."""


def _instance_class():  # noqa: ANN202 - built lazily so that importing this module does not import selenium
    from miniwob.fields import get_field_extractor
    from miniwob.selenium_instance import SeleniumInstance
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.wait import WebDriverWait

    class Browser(SeleniumInstance):
        """miniwob's SeleniumInstance that can change task page, with its process ids and a hard close."""

        def __init__(self, task: str, proxy_port: int | None = None, index: int = 0) -> None:
            configure_offline()
            reap_orphans()
            _install_options_wrapper()
            super().__init__(index=index, subdomain=task, headless=True)
            self.task = task
            self._flags = network_flags(proxy_port)
            _local.flags = self._flags
            try:
                self.create_driver()
            except BaseException:
                if hasattr(self, "driver"):  # started but the page did not load: leave nothing running
                    with contextlib.suppress(Exception):
                        self.driver.quit()
                raise
            finally:
                _local.flags = ()
            # a hung Chromium must fail the episode, not block the pool for Selenium's default 120 s
            self.driver.command_executor.client_config.timeout = COMMAND_TIMEOUT_S
            svc = self.driver.service.process
            self.driver_pid: int = svc.pid
            self.pids: list[int] = [svc.pid, *(p.pid for p in psutil.Process(svc.pid).children(recursive=True))]
            self.episodes_on_page = 0

        @property
        def chrome_pid(self) -> int | None:
            """The main Chromium process (chromedriver's direct child)."""
            try:
                kids = psutil.Process(self.driver_pid).children()
            except psutil.NoSuchProcess:
                return None
            return next((k.pid for k in kids if "chrom" in k.name()), None)

        def load(self, task: str) -> None:
            """Show another task's page in this browser (same window, same process)."""
            if task == self.task:
                return
            self.url = self.url.rsplit("/", 1)[0] + f"/{task}.html"
            self.field_extractor = get_field_extractor(task)
            self.driver.get(self.url)
            WebDriverWait(self.driver, 5).until(EC.element_to_be_clickable((By.ID, self.SYNC_SCREEN_ID)))
            self.task = task

        def start_episode(self, seed: int, time_limit_s: float) -> None:
            """End whatever runs, seed the page and start an episode with our time limit (MiniWoB's is 10 s)."""
            self.driver.execute_script(f"core.EPISODE_MAX_TIME = {int(time_limit_s * 1000)};")
            self.force_stop()
            self.begin_task(seed=seed)

        def metadata(self) -> dict[str, Any]:
            return self.get_metadata()

        def quit(self) -> None:
            """Close the browser; kill whatever of it is still running (a crashed Chromium leaves orphans)."""
            # and what Chromium started since (renderers): a quit that fails under load leaves them running
            pids = set(self.pids)
            with contextlib.suppress(psutil.Error):
                pids.update(p.pid for p in psutil.Process(self.driver_pid).children(recursive=True))
            with contextlib.suppress(Exception):
                self.driver.quit()
            procs = []
            for pid in pids:
                with contextlib.suppress(psutil.NoSuchProcess):
                    procs.append(psutil.Process(pid))
            for p in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            psutil.wait_procs(procs, timeout=5)
            self.died = True

    return Browser


_BROWSER_CLASS = None


def start_browser(task: str, proxy_port: int | None = None, index: int = 0, retries: int = 2) -> Any:
    """A started Browser showing `task` (retries a failed start: Chromium occasionally fails under load)."""
    global _BROWSER_CLASS
    if _BROWSER_CLASS is None:
        _BROWSER_CLASS = _instance_class()
    last: Exception | None = None
    for k in range(retries + 1):
        try:
            return _BROWSER_CLASS(task, proxy_port, index)
        except Exception as e:  # noqa: BLE001 - a failed start is retried, then reported by name
            last = e
            time.sleep(0.5 * (k + 1))
    raise BrowserDied(f"Chromium did not start after {retries + 1} tries: {type(last).__name__}: {last}")
