// A live session: the remote screen; in annotate mode the model's proposals and the person's own action and
// thought; in think-aloud mode the microphone (MediaRecorder) and every pointer and key event with its time.
"use strict";
const KEYS = { Enter: "enter", Backspace: "backspace", Tab: "tab", Escape: "esc", Control: "ctrl", Alt: "alt",
               Meta: "cmd", ArrowUp: "up", ArrowDown: "down", ArrowLeft: "left", ArrowRight: "right",
               Delete: "delete", Home: "home", End: "end", PageUp: "pageup", PageDown: "pagedown" };
const BUTTONS = ["left", "middle", "right"];

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("live"), sid = root.dataset.session, mode = root.dataset.mode;
  const img = document.getElementById("shot"), svg = document.getElementById("marks"), box = document.getElementById("screen");
  const runBtn = document.getElementById("run"), thought = document.getElementById("thought");
  let st = null, pending = null, busy = false;
  const rec = { recorder: null, t0: null, chunks: [], events: [] };
  const clock = () => (rec.t0 === null ? null : Math.round(performance.now() - rec.t0) / 1000);

  function render(s) {
    st = s;
    img.onload = () => redraw();
    img.src = s.screenshot;
    document.getElementById("step").textContent = s.step;
    document.getElementById("outcome").textContent = s.done
      ? `done: ${s.passed ? "passed" : "not passed"} (${s.reason})${s.landed ? ", landed" : ""}` : (s.error || "");
    root.dataset.step = s.step; root.dataset.done = s.done; root.dataset.landed = s.landed;
    const list = document.getElementById("proposals");
    if (list) {
      list.replaceChildren();
      s.proposals.forEach((p, i) => {
        const li = document.createElement("li");
        li.className = "proposal";
        li.innerHTML = `<span class="swatch p${i}"></span><b>Thought:</b> <span class="t"></span><br><code class="a"></code><br>`;
        li.querySelector(".t").textContent = p.thought || "(none)";
        li.querySelector(".a").textContent = p.action;
        const b = document.createElement("button");
        b.type = "button"; b.className = "accept"; b.textContent = `accept ${i + 1}`; b.disabled = s.done;
        b.addEventListener("click", () => send({ accept: i }));
        li.appendChild(b); list.appendChild(li);
      });
    }
    const h = document.getElementById("history");
    h.replaceChildren(...s.history.map((x) => {
      const li = document.createElement("li");
      li.textContent = `${x.decision ? x.decision + ": " : ""}${x.action}${x.thought ? " — " + x.thought : ""}`;
      return li;
    }));
    setPending(null);
  }
  function redraw() {
    const marks = st ? st.proposals.map((p, i) => ({ ...p, cls: `p${i}` })) : [];
    if (pending && pending.x != null) marks.push({ ...pending, cls: "mine" });
    drawMarks(svg, img, marks);
  }
  function setPending(p) {
    pending = p;
    document.getElementById("pending").textContent = actionLabel(p);
    if (runBtn) runBtn.disabled = !p || (st && st.done);
    redraw();
  }
  async function send(data) {
    if (busy) return;
    busy = true;
    try { render(await WB.call("POST", `/api/live/${sid}/act`, data)); WB.say(""); }
    catch (e) { /* WB.call showed the message */ }
    finally { busy = false; }
  }
  const screen = new RemoteScreen(box, img, (parts, typing) => {
    setPending(parts);
    if (mode === "annotate" || !parts || typing) return;
    if (rec.t0 === null) { WB.say("press record first: think-aloud sessions are recorded from the start"); return; }
    send({ input: parts, t: clock() });
  });
  if (runBtn) runBtn.addEventListener("click", () => {
    if (pending) send({ input: pending, thought: thought.value }).then(() => { thought.value = ""; });
  });

  // think-aloud: raw input events on the recording's clock, in the bundle format's vocabulary
  function raw(type, e, extra) {
    if (rec.t0 === null || !rec.recorder) return;
    rec.events.push({ t: clock(), type, ...extra });
  }
  box.addEventListener("mousedown", (e) => raw("mouse_down", e, { ...screen.point(e), button: BUTTONS[e.button] || "left" }), true);
  box.addEventListener("mouseup", (e) => raw("mouse_up", e, { ...screen.point(e), button: BUTTONS[e.button] || "left" }), true);
  box.addEventListener("wheel", (e) => raw("wheel", e, { ...screen.point(e), dx: -Math.sign(e.deltaX), dy: -Math.sign(e.deltaY) }), true);
  let sendingText = false;  // Enter after typed text is the page's "send the text", not a key for the app
  for (const [dom, type] of [["keydown", "key_down"], ["keyup", "key_up"]]) {
    box.addEventListener(dom, (e) => {
      if (e.key === "Shift") return;  // the character carries its case
      if (e.key === "Enter" && (type === "key_down" ? screen.text : sendingText)) { sendingText = type === "key_down"; return; }
      raw(type, e, { key: KEYS[e.key] || (e.key.length === 1 ? e.key : e.key.toLowerCase()) });
    }, true);
  }
  const recBtn = document.getElementById("record");
  if (recBtn) recBtn.addEventListener("click", async () => {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    rec.recorder = new MediaRecorder(stream);
    rec.recorder.ondataavailable = (e) => { if (e.data.size) rec.chunks.push(e.data); };
    rec.recorder.onstart = () => {
      rec.t0 = performance.now();
      root.dataset.recording = "true";
      document.getElementById("rec-state").textContent = "recording";
      box.focus();
    };
    rec.recorder.start(1000);
    recBtn.disabled = true;
  });
  async function finishRecording() {
    if (!rec.recorder) { WB.say("nothing was recorded: press record first"); return; }
    const stopped = new Promise((ok) => { rec.recorder.onstop = ok; });
    rec.recorder.stop();
    rec.recorder.stream.getTracks().forEach((t) => t.stop());
    await stopped;
    document.getElementById("rec-state").textContent = "uploading";
    await WB.call("POST", `/api/live/${sid}/events`, { events: rec.events });
    const blob = new Blob(rec.chunks, { type: rec.recorder.mimeType || "audio/webm" });
    const r = await WB.call("POST", `/api/live/${sid}/audio`, undefined, blob);
    root.dataset.landed = "true";
    document.getElementById("rec-state").textContent = "landed";
    WB.say(`landed ${r.session_id}: ${r.n_actions} action(s), ${r.audio_s} s of audio; the next intake transcribes it`);
  }
  document.getElementById("finish").addEventListener("click", async () => {
    if (mode !== "annotate") { await finishRecording(); return; }
    const r = await WB.call("POST", `/api/live/${sid}/finish`, {});
    root.dataset.landed = "true";
    WB.say(`landed ${r.session_id}: ${r.episodes_added} episode(s), ${r.pairs_added} preference pair(s)`);
  });
  WB.call("GET", `/api/live/${sid}`).then(render);
});
