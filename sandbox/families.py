"""Task families: each builds a screen, a goal and an instruction from a seeded random generator and a level.

Levels run 1..5 and grow the expert's path from one or two steps to ten or more, adding distractors on the
way: similar names, disabled look-alikes, tabs, content below the fold, long lists, pop-ups with a harmful
button, confirmation dialogs. Builders are pure functions of (rng, level, width, height): the same seed gives
the same screen, and Env rebuilds a task's screen by calling the builder again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from sandbox import vocab as V
from sandbox.goals import AnswerGoal, ButtonGoal, CheckGoal, FormGoal, Goal, MenuGoal, OpenGoal
from sandbox.screen import Screen
from sandbox.widgets import LIST_ROW_H, Dialog, MenuNode, Widget

LEVELS = (1, 2, 3, 4, 5)


@dataclass
class Built:
    screen: Screen
    goal: Goal
    instruction: str
    reference_answer: str | None = None


Builder = Callable[[random.Random, int, int, int], Built]


def _q(names: list[str]) -> str:
    qs = [f"'{n}'" for n in names]
    return qs[0] if len(qs) == 1 else ", ".join(qs[:-1]) + " and " + qs[-1]


def _button_names(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = f"{rng.choice(V.VERBS)} {rng.choice(V.OBJECTS)}"
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


def _similar(rng: random.Random, name: str, n: int, taken: set[str]) -> list[str]:
    """Names sharing the verb or the object of `name` (the look-alikes that make a level harder)."""
    verb, obj = name.split(" ", 1)
    cands = [f"{verb} {o}" for o in V.OBJECTS] + [f"{v} {obj}" for v in V.VERBS]
    cands = [c for c in cands if c not in taken]
    out = rng.sample(cands, min(n, len(cands)))
    taken.update(out)
    return out


def _dialogs(rng: random.Random, n: int, harmful: bool, triggers: list[str]) -> list[Dialog]:
    pool = [d for d in V.DIALOGS if (len(d[2]) > 1) == harmful] if n == 1 else list(V.DIALOGS)
    out = []
    for i, (title, msg, buttons) in enumerate(rng.sample(pool, n)):
        bs = [Widget("button", b, key=f"dialog{i}:{b}", effect=eff) for b, eff in buttons]
        rng.shuffle(bs)
        out.append(Dialog(f"dialog{i}", title, msg, bs, trigger=triggers[i]))
    return out


def _chain(n: int) -> list[str]:
    return ["start"] + [f"after:dialog{i}" for i in range(n - 1)]


# ---- click a named button ---------------------------------------------------------------------------------


def _buttons_layout(rng: random.Random, level: int) -> tuple[list[Widget], list[str] | None, list[str], str]:
    """Buttons (with tabs at level 3+) and a target sequence; returns content, tabs, target keys, instruction."""
    taken: set[str] = set()
    if level == 1:
        names = _button_names(rng, 3, taken)
        t = rng.choice(names)
        ins = rng.choice(("Click the '{b}' button.", "Press '{b}'.", "Find the button labelled '{b}' and click it."))
        return [Widget("button", n) for n in names], None, [f"button:{t}"], ins.format(b=t)
    if level == 2:
        t = _button_names(rng, 1, taken)[0]
        sim = _similar(rng, t, 3, taken)
        other = _button_names(rng, 2, taken)
        ws = [Widget("button", n) for n in [t, *sim[:2], *other]] + [Widget("button", sim[2], enabled=False)]
        rng.shuffle(ws)
        ins = rng.choice(("Click the '{b}' button.", "Press '{b}'.", "Press the button named exactly '{b}'."))
        return ws, None, [f"button:{t}"], ins.format(b=t)
    tabs = rng.sample(V.TABS, 3)
    per_tab, n_seq = {3: (4, 1), 4: (6, 2), 5: (22, 3)}[level]
    seq_tabs = rng.sample(tabs[1:], 1) if n_seq == 1 else rng.sample(tabs, n_seq)
    if level == 4 and seq_tabs[0] == tabs[0]:
        seq_tabs.reverse()
    content: list[Widget] = []
    seq: list[str] = []
    targets = _button_names(rng, n_seq, taken)
    for tab in tabs:
        names = _button_names(rng, per_tab, taken)
        if tab in seq_tabs:
            t = targets[seq_tabs.index(tab)]
            pos = rng.randrange(per_tab - 4, per_tab) if level == 5 else rng.randrange(per_tab)
            names[pos] = t
            sim = _similar(rng, t, 1, taken)[0]
            names[(pos + 1) % per_tab] = sim
        ws = [Widget("button", n, tab=tab) for n in names]
        if level >= 4:
            ws[rng.randrange(per_tab)].enabled = False
            for w in ws:
                if w.name in targets:
                    w.enabled = True
        content += ws
    seq = [f"button:{t}" for t in targets]
    parts = [f"'{t}' on the {tab} tab" for t, tab in zip(targets, seq_tabs)]
    if n_seq == 1:
        ins = rng.choice(("On the {t} tab, click '{b}'.", "Go to the {t} tab and press '{b}'."))
        ins = ins.format(t=seq_tabs[0], b=targets[0])
    else:
        ins = "Press " + ", then ".join(parts) + "."
    return content, tabs, seq, ins


def build_click_button(rng: random.Random, level: int, width: int, height: int) -> Built:
    content, tabs, seq, ins = _buttons_layout(rng, level)
    return Built(Screen(width, height, rng.choice(V.APPS), content, tabs=tabs), ButtonGoal(sequence=seq), ins)


# ---- fill a form and submit -------------------------------------------------------------------------------

_FIELDS: dict[str, Callable[[random.Random], str]] = {
    "First name": lambda r: r.choice(V.FIRST),
    "Last name": lambda r: r.choice(V.LAST),
    "City": lambda r: r.choice(V.CITIES),
    "Company": lambda r: r.choice(V.COMPANIES),
    "Job title": lambda r: r.choice(V.JOBS),
    "Email": lambda r: f"{r.choice(V.FIRST).lower()}.{r.choice(V.LAST).lower()}@example.com",
    "Phone": lambda r: f"555-{r.randrange(10000):04d}",
    "Zip code": lambda r: f"{r.randrange(10000, 99999)}",
    "Username": lambda r: f"{r.choice(V.FIRST).lower()}{r.randrange(10, 99)}",
}


def _form(
    rng: random.Random, n_text: int, n_pre: int, n_drop: int, n_extra: int, tab: str | None
) -> tuple[list[Widget], FormGoal, str]:
    labels = rng.sample(sorted(_FIELDS), n_text + n_extra)
    drops = rng.sample(sorted(V.DROPDOWNS), n_drop)
    ws: list[Widget] = []
    values: dict[str, str] = {}
    for i, lab in enumerate(labels):
        w = Widget("textbox", lab, value="", tab=tab)
        if i < n_text:
            v = _FIELDS[lab](rng)
            values[w.key] = v
            if i < n_pre:
                while (pre := _FIELDS[lab](rng)) == v:
                    pass
                w.value = pre
        else:
            w.value = _FIELDS[lab](rng) if rng.random() < 0.5 else ""
        ws.append(w)
    for lab in drops:
        opts = V.DROPDOWNS[lab]
        w = Widget("dropdown", lab, value=opts[0], options=opts, tab=tab)
        values[w.key] = rng.choice(opts[1:])
        ws.append(w)
    rng.shuffle(ws)
    submit, cancel = rng.choice(
        (("Submit", "Cancel"), ("Save", "Discard"), ("Send", "Cancel"), ("Register", "Back"), ("Continue", "Cancel"))
    )
    ws += [Widget("button", submit, effect="submit", tab=tab), Widget("button", cancel, tab=tab)]
    order = [w for w in ws if w.key in values]
    pairs = [f"{w.name} '{values[w.key]}'" for w in order]
    pairs_s = pairs[0] if len(pairs) == 1 else ", ".join(pairs[:-1]) + " and " + pairs[-1]
    ins = rng.choice(
        (
            "Fill in the form with {p}, then click '{s}'.",
            "Enter {p} and press '{s}'.",
            "Set {p}, then submit with '{s}'.",
        )
    )
    goal = FormGoal(values={w.key: values[w.key] for w in order}, submit=f"button:{submit}")
    return ws, goal, ins.format(p=pairs_s, s=submit)


_FORM_SPEC = {1: (1, 0, 0, 0), 2: (2, 0, 0, 0), 3: (2, 0, 1, 0), 4: (3, 1, 1, 1), 5: (4, 2, 1, 2)}


def build_fill_form(rng: random.Random, level: int, width: int, height: int) -> Built:
    tabs = rng.sample(V.TABS, 2) if level == 5 else None
    ws, goal, ins = _form(rng, *_FORM_SPEC[level], tab=tabs[1] if tabs else None)
    if tabs:
        facts = _facts(rng, 3, tabs[0])
        ws = facts + ws
        ins = f"On the {tabs[1]} tab: " + ins[0].lower() + ins[1:]
    return Built(Screen(width, height, rng.choice(V.APPS), ws, tabs=tabs), goal, ins)


# ---- tick a set of checkboxes -----------------------------------------------------------------------------

_CHECK_SPEC = {1: (3, 1, 0, 0, 0), 2: (4, 2, 0, 0, 0), 3: (6, 2, 1, 0, 0), 4: (8, 2, 2, 1, 1), 5: (20, 4, 3, 1, 2)}


def build_checkboxes(rng: random.Random, level: int, width: int, height: int) -> Built:
    n, n_tick, n_untick, n_keep, n_dis = _CHECK_SPEC[level]
    names = rng.sample(V.CHECKBOXES, n)
    tick, untick = names[:n_tick], names[n_tick : n_tick + n_untick]
    keep = names[n_tick + n_untick : n_tick + n_untick + n_keep]
    disabled = names[n - n_dis :] if n_dis else []
    ws = [Widget("checkbox", nm, checked=nm in untick or nm in keep, enabled=nm not in disabled) for nm in names]
    rng.shuffle(ws)
    apply, cancel = rng.choice((("Apply", "Cancel"), ("Save changes", "Discard"), ("OK", "Cancel"), ("Done", "Reset")))
    ws += [Widget("button", apply, effect="apply"), Widget("button", cancel)]
    want = [w.name for w in ws if w.name in tick or w.name in keep]
    desired = {w.key: w.name in want for w in ws if w.role == "checkbox" and w.enabled}
    ins = rng.choice(
        (
            "Make sure only {c} {v} ticked, then click '{a}'.",
            "Tick {c} and untick everything else, then press '{a}'.",
            "Leave exactly {c} checked and click '{a}'.",
        )
    )
    ins = ins.format(c=_q(want), v="is" if len(want) == 1 else "are", a=apply)
    return Built(
        Screen(width, height, rng.choice(V.APPS), ws), CheckGoal(desired=desired, apply=f"button:{apply}"), ins
    )


# ---- follow a menu path -----------------------------------------------------------------------------------


def _menu_items(rng: random.Random, n: int, avoid: set[str] = frozenset()) -> list[MenuNode]:  # type: ignore[assignment]
    return [MenuNode(w) for w in rng.sample([w for w in V.MENU_WORDS if w not in avoid], n)]


def build_menu_path(rng: random.Random, level: int, width: int, height: int) -> Built:
    n_cmds, depth = {1: (1, 2), 2: (1, 3), 3: (1, 4), 4: (2, 3), 5: (3, 4)}[level]
    tops = [MenuNode(t, _menu_items(rng, rng.randint(4, 6))) for t in V.TOP_MENUS[: rng.randint(4, 7)]]
    for top in tops:  # some random submenus, for realism and as wrong turns
        for it in top.children:
            if rng.random() < 0.3:
                it.children = _menu_items(rng, rng.randint(3, 5), {it.name})
    commands: list[list[str]] = []
    on_path: set[int] = set()
    while len(commands) < n_cmds:
        d = depth if level != 5 else rng.choice((3, 4))
        node = rng.choice(tops)
        path = [node]
        for _ in range(1, d):
            if not node.children:
                if id(node) in on_path:
                    break
                node.children = _menu_items(rng, rng.randint(3, 5), {node.name})
            node = rng.choice(node.children)
            path.append(node)
        if len(path) < d or id(node) in on_path:
            continue
        node.children = []  # the command is a leaf
        commands.append([p.name for p in path])
        on_path.update(id(p) for p in path)
    if level >= 3:  # disabled items (never on a target path) as distractors
        for top in tops:
            for it in top.children:
                if id(it) not in on_path and rng.random() < 0.25:
                    it.enabled = False
    doc = Widget("text", "Document", value=f"{rng.choice(V.FILE_STEMS)}_{rng.randrange(2015, 2025)}.txt")
    words = Widget("text", "Words", value=str(rng.randrange(100, 5000)))
    paths = [" > ".join(c) for c in commands]
    if n_cmds == 1:
        ins = rng.choice(("Choose {p} from the menu.", "Use the menu: {p}.", "Run the menu command {p}.")).format(
            p=paths[0]
        )
    else:
        ins = "Use the menus to run " + ", then ".join(paths) + "."
    screen = Screen(width, height, rng.choice(V.APPS), [doc, words], menus=tops)
    return Built(screen, MenuGoal(commands=commands), ins)


# ---- scroll a list to find and open an item ---------------------------------------------------------------


def _visible_rows(height: int, extra_rows: int) -> int:
    avail = height - 24 - 28 - 6 - 24 - 36 * extra_rows - 16
    return max(3, min(8, avail // LIST_ROW_H))


def _file_names(rng: random.Random, n: int, target: str | None = None) -> list[str]:
    """n distinct sorted file names; with a target, it is among them with look-alikes (same stem, other year)."""
    out: set[str] = set()
    if target:
        stem, rest = target.split("_", 1)
        year, ext = rest.split(".")
        out.update(f"{stem}_{y}.{ext}" for y in rng.sample(range(2015, 2025), 3))
        out.add(f"{stem}_{year}.{rng.choice(V.FILE_EXTS)}")
        out.add(target)
    while len(out) < n:
        out.add(f"{rng.choice(V.FILE_STEMS)}_{rng.randrange(2015, 2025)}.{rng.choice(V.FILE_EXTS)}")
    return sorted(out)


def _start_far_from(rng: random.Random, n: int, rows: int, t_row: int, mind: int) -> int:
    """A first visible row that hides t_row at least `mind` rows away (the farthest one if none is that far)."""

    def dist(s: int) -> int:
        return t_row - (s + rows - 1) if t_row >= s + rows else s - t_row if t_row < s else -1

    starts = list(range(max(1, n - rows + 1)))
    ok = [s for s in starts if dist(s) >= mind]
    return rng.choice(ok) if ok else max(starts, key=dist)


def build_scroll_find(rng: random.Random, level: int, width: int, height: int) -> Built:
    n, mind = {1: (6, 0), 2: (16, 8), 3: (30, 10), 4: (50, 20), 5: (80, 44)}[level]
    tabs = rng.sample(V.TABS, 2) if level == 5 else None
    tab = tabs[1] if tabs else None
    rows = _visible_rows(height, 1)
    if level >= 3:
        target = f"{rng.choice(V.FILE_STEMS)}_{rng.randrange(2015, 2025)}.{rng.choice(V.FILE_EXTS)}"
        items = _file_names(rng, n, target)
        t_row = items.index(target)
        start = _start_far_from(rng, n, rows, t_row, mind)
    else:
        items = _file_names(rng, n)
        start = 0
        t_row = rng.randrange(rows, n) if level == 2 and rng.random() < 0.8 else rng.randrange(min(rows, n))
        target = items[t_row]
    lw = Widget("list", "Files", span=2, items=[(it, "") for it in items], offset=start, visible_rows=rows, tab=tab)
    folder = Widget("text", "Folder", value=rng.choice(("Documents", "Shared", "Archive", "Downloads")), tab=tab)
    count = Widget("text", "Files", value=str(n), key="text:count", tab=tab)
    content = [folder, count, lw]
    if tabs:
        content = _facts(rng, 3, tabs[0]) + content
    ins = rng.choice(
        ("Open '{f}' from the file list.", "Find '{f}' in the list and open it.", "Scroll to '{f}' and open it.")
    )
    ins = ins.format(f=target)
    if tabs:
        ins = f"On the {tab} tab: " + ins[0].lower() + ins[1:]
    return Built(
        Screen(width, height, rng.choice(V.APPS), content, tabs=tabs), OpenGoal(list_key=lw.key, item=target), ins
    )


# ---- a pop-up covers the target ---------------------------------------------------------------------------


def build_popup(rng: random.Random, level: int, width: int, height: int) -> Built:
    title = rng.choice(V.APPS)
    if level <= 3:
        content, tabs, seq, ins = _buttons_layout(rng, {1: 1, 2: 2, 3: 3}[level])
        n = 2 if level == 3 else 1
        dialogs = _dialogs(rng, n, harmful=level >= 2, triggers=_chain(n))
        goal: Goal = ButtonGoal(sequence=seq)
    else:
        tabs = rng.sample(V.TABS, 2) if level == 5 else None
        spec = (2, 0, 0, 0) if level == 4 else (3, 1, 1, 0)
        content, goal, ins = _form(rng, *spec, tab=tabs[1] if tabs else None)
        triggers = ["start", "submit"] if level == 4 else ["start", f"tab:{tabs[1]}", "submit"]  # type: ignore[index]
        dialogs = _dialogs(rng, len(triggers) - 1, harmful=True, triggers=triggers[:-1])
        confirm = Dialog("confirm", "Confirm", "Send this form now?",
                         [Widget("button", "Cancel", key="confirm:Cancel", effect="cancel"),
                          Widget("button", "Confirm", key="confirm:Confirm", effect="confirm")], trigger="submit")  # fmt: skip
        dialogs.append(confirm)
        if tabs:
            content = _facts(rng, 3, tabs[0]) + content
            ins = f"On the {tabs[1]} tab: " + ins[0].lower() + ins[1:]
    return Built(Screen(width, height, title, content, tabs=tabs, dialogs=dialogs), goal, ins)


# ---- answer a question read off the screen ----------------------------------------------------------------


def _fact_value(rng: random.Random, kind: str) -> str:
    if kind == "money":
        return f"${rng.randrange(5, 2000)}.{rng.randrange(100):02d}"
    if kind == "code":
        return f"{rng.choice(('INV', 'TRK', 'TKT', 'ORD'))}-{rng.randrange(1000, 99999)}"
    if kind == "date":
        return f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    if kind == "person":
        return f"{rng.choice(V.FIRST)} {rng.choice(V.LAST)}"
    if kind == "int":
        return str(rng.randrange(1, 60))
    if kind == "pct":
        return f"{rng.randrange(5, 99)}%"
    if kind == "plan":
        return rng.choice(V.DROPDOWNS["Plan"])
    return rng.choice(V.STATUSES)


def _facts(rng: random.Random, n: int, tab: str | None, avoid: set[str] = frozenset()) -> list[Widget]:  # type: ignore[assignment]
    picks = rng.sample([f for f in V.FACTS if f[0] not in avoid], n)
    avoid |= {p[0] for p in picks}  # type: ignore[operator]
    return [Widget("text", lab, value=_fact_value(rng, kind), tab=tab, key=f"text:{lab}:{tab}") for lab, kind in picks]


_QUESTIONS = ("What is the {l}?", "Read the {l} off the screen and report it.", "What {l} does the window show?")


def build_answer(rng: random.Random, level: int, width: int, height: int) -> Built:
    title = rng.choice(V.APPS)
    if level <= 2:
        tabs = rng.sample(V.TABS, 3) if level == 2 else None
        content: list[Widget] = []
        used: set[str] = set()
        for tab in tabs or [None]:
            fs = _facts(rng, 4 if level == 1 else 3, tab, used)
            used |= {f.name for f in fs}
            content += fs
        cands = [w for w in content if w.tab != (tabs[0] if tabs else "x")] if tabs else content
        t = rng.choice(cands)
        q = rng.choice(_QUESTIONS).format(l=t.name.lower())
        if tabs:
            q = f"On the {t.tab} tab: {q[0].lower()}{q[1:]}"
        return Built(
            Screen(width, height, title, content, tabs=tabs),
            AnswerGoal(reference=t.value or "", source=t.key),
            q,
            t.value,
        )
    tabs = rng.sample(V.TABS, 2) if level >= 4 else None
    tab = tabs[1] if tabs else None
    rows = _visible_rows(height, 1)
    content = _facts(rng, 2, tabs[0]) if tabs else []
    if level <= 4:
        n = 20 if level == 3 else 30
        prods = sorted(rng.sample(V.PRODUCTS, n))
        items = [(p, f"${rng.randrange(2, 300)}.{rng.randrange(100):02d}") for p in prods]
        row = rng.randrange(rows, n)
        lw = Widget("list", "Products", span=2, items=items, visible_rows=rows, tab=tab)
        q = rng.choice(
            ("What is the price of '{p}'?", "How much does '{p}' cost?", "Find '{p}' in the list: what is its price?")
        )
        q = q.format(p=items[row][0])
        goal = AnswerGoal(reference=items[row][1], source=lw.key, row=row)
        ref = items[row][1]
    else:
        n = rng.randrange(36, 49)
        base = rng.randrange(10000, 90000)
        items = [(f"Order {base + i}", rng.choice(V.STATUSES)) for i in range(n)]
        status = rng.choice(V.STATUSES)
        ref = str(sum(1 for _, s in items if s == status))
        lw = Widget("list", "Orders", span=2, items=items, visible_rows=rows, tab=tab)
        q = rng.choice(("How many orders in the list are '{s}'?", "Count the orders with status '{s}'.")).format(
            s=status
        )
        goal = AnswerGoal(reference=ref, source=lw.key, count_value=status)
    content += [Widget("text", "Items", value=str(len(items)), tab=tab, key="text:items"), lw]
    if tabs:
        q = f"On the {tab} tab: {q[0].lower()}{q[1:]}"
    dialogs = _dialogs(rng, 1, harmful=True, triggers=["start"]) if level >= 4 else None
    return Built(Screen(width, height, title, content, tabs=tabs, dialogs=dialogs), goal, q, ref)


FAMILIES: dict[str, Builder] = {
    "click_button": build_click_button,
    "fill_form": build_fill_form,
    "checkboxes": build_checkboxes,
    "menu_path": build_menu_path,
    "scroll_find": build_scroll_find,
    "popup": build_popup,
    "answer": build_answer,
}
