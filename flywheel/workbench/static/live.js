// A live session: the remote screen, the model's proposals (annotate mode), the person's own action and thought.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("live"), sid = root.dataset.session, mode = root.dataset.mode;
  const img = document.getElementById("shot"), svg = document.getElementById("marks");
  const runBtn = document.getElementById("run"), thought = document.getElementById("thought");
  let st = null, pending = null, busy = false;

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
    runBtn.disabled = !p || (st && st.done);
    redraw();
  }
  async function send(data) {
    if (busy) return;
    busy = true;
    try { render(await WB.call("POST", `/api/live/${sid}/act`, data)); WB.say(""); }
    catch (e) { /* WB.call showed the message */ }
    finally { busy = false; }
  }
  new RemoteScreen(document.getElementById("screen"), img, (parts, typing) => {
    setPending(parts);
    if (mode !== "annotate" && parts && !typing) send({ input: parts, thought: thought.value });
  });
  runBtn.addEventListener("click", () => { if (pending) send({ input: pending, thought: thought.value }).then(() => { thought.value = ""; }); });
  document.getElementById("finish").addEventListener("click", async () => {
    const r = await WB.call("POST", `/api/live/${sid}/finish`, {});
    root.dataset.landed = "true";
    WB.say(`landed ${r.session_id}: ${r.episodes_added} episode(s), ${r.pairs_added} preference pair(s)`);
  });
  WB.call("GET", `/api/live/${sid}`).then(render);
});
