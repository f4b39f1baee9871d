// The remote screen: turns a person's input on the screenshot into the parts of one action of the grammar
// (schemas/actions.py): click, left_double, right_single, drag, scroll, type, hotkey. Points are in pixels of
// the screenshot (the image may be shown scaled). The server builds and validates the action from the parts.
"use strict";
class RemoteScreen {
  constructor(box, img, onAction) {
    this.box = box; this.img = img; this.onAction = onAction;
    this.down = null; this.clickTimer = null; this.wheel = null; this.text = "";
    box.addEventListener("mousedown", (e) => this.mousedown(e));
    box.addEventListener("mouseup", (e) => this.mouseup(e));
    box.addEventListener("contextmenu", (e) => { e.preventDefault(); this.emit({ kind: "right_single", ...this.point(e) }); });
    box.addEventListener("wheel", (e) => this.wheelTurn(e), { passive: false });
    box.addEventListener("keydown", (e) => this.key(e));
  }
  point(e) {
    const r = this.img.getBoundingClientRect();
    const sx = this.img.naturalWidth / r.width, sy = this.img.naturalHeight / r.height;
    const x = Math.round((e.clientX - r.left) * sx), y = Math.round((e.clientY - r.top) * sy);
    return { x: Math.max(0, Math.min(this.img.naturalWidth - 1, x)), y: Math.max(0, Math.min(this.img.naturalHeight - 1, y)) };
  }
  mousedown(e) { if (e.button !== 0) return; this.box.focus(); this.down = this.point(e); e.preventDefault(); }
  mouseup(e) {
    if (e.button !== 0 || !this.down) return;
    const p = this.point(e), d = this.down; this.down = null;
    if (Math.hypot(p.x - d.x, p.y - d.y) > 5) { this.emit({ kind: "drag", x: d.x, y: d.y, x2: p.x, y2: p.y }); return; }
    if (this.clickTimer) {  // a second click within 300 ms: a double click
      clearTimeout(this.clickTimer); this.clickTimer = null; this.emit({ kind: "left_double", ...d }); return;
    }
    this.clickTimer = setTimeout(() => { this.clickTimer = null; this.emit({ kind: "click", ...d }); }, 300);
  }
  wheelTurn(e) {
    e.preventDefault();
    const dir = Math.abs(e.deltaX) > Math.abs(e.deltaY) ? (e.deltaX > 0 ? "right" : "left") : (e.deltaY > 0 ? "down" : "up");
    if (this.wheel) clearTimeout(this.wheel.timer);
    const p = this.wheel && this.wheel.dir === dir ? this.wheel.p : this.point(e);
    this.wheel = { dir, p, timer: setTimeout(() => { this.wheel = null; this.emit({ kind: "scroll", ...p, direction: dir }); }, 250) };
  }
  key(e) {
    const named = { Enter: "enter", Tab: "tab", Escape: "esc", ArrowUp: "up", ArrowDown: "down", ArrowLeft: "left",
                    ArrowRight: "right", Delete: "delete", Home: "home", End: "end", PageUp: "pageup", PageDown: "pagedown" };
    const mods = [e.ctrlKey && "ctrl", e.altKey && "alt", e.metaKey && "cmd"].filter(Boolean);
    if (["Control", "Alt", "Meta", "Shift"].includes(e.key)) return;
    e.preventDefault();
    if (mods.length) { this.flush(); this.emit({ kind: "hotkey", key: [...mods, (named[e.key] || e.key).toLowerCase()].join(" ") }); return; }
    if (e.key === "Backspace") { if (this.text) { this.text = this.text.slice(0, -1); this.typing(); } else this.emit({ kind: "hotkey", key: "backspace" }); return; }
    if (e.key.length === 1) { this.text += e.key; this.typing(); return; }
    if (e.key === "Enter" && this.text) { this.flush(); return; }
    if (named[e.key]) { this.flush(); this.emit({ kind: "hotkey", key: named[e.key] }); }
  }
  typing() { this.onAction(this.text ? { kind: "type", text: this.text } : null, true); }
  flush() { if (this.text) { const t = this.text; this.text = ""; this.emit({ kind: "type", text: t }); } }
  emit(parts) { this.text = ""; this.onAction(parts, false); }
}
function actionLabel(p) {
  if (!p) return "(none)";
  if (p.kind === "drag") return `drag(${p.x},${p.y} -> ${p.x2},${p.y2})`;
  if (p.kind === "scroll") return `scroll(${p.x},${p.y} ${p.direction})`;
  if (p.kind === "type") return `type(${JSON.stringify(p.text)})`;
  if (p.kind === "hotkey") return `hotkey(${p.key})`;
  return `${p.kind}(${p.x},${p.y})`;
}
function drawMarks(svg, img, marks) {
  // marks: [{x, y, x2, y2, cls}] in screenshot pixels; the SVG's viewBox is the screenshot's size.
  svg.setAttribute("viewBox", `0 0 ${img.naturalWidth || 1} ${img.naturalHeight || 1}`);
  svg.replaceChildren();
  const ns = "http://www.w3.org/2000/svg";
  for (const m of marks) {
    if (m.x == null || m.y == null) continue;
    const c = document.createElementNS(ns, "circle");
    c.setAttribute("cx", m.x); c.setAttribute("cy", m.y); c.setAttribute("r", 9); c.setAttribute("class", m.cls);
    svg.appendChild(c);
    if (m.x2 != null) {
      const l = document.createElementNS(ns, "line");
      for (const [k, v] of [["x1", m.x], ["y1", m.y], ["x2", m.x2], ["y2", m.y2]]) l.setAttribute(k, v);
      l.setAttribute("class", m.cls); l.setAttribute("stroke", "currentColor"); svg.appendChild(l);
    }
  }
}
