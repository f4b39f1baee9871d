// Audit pages: draw a sample; record good/bad with a note and go on to the next episode.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("sample");
  if (form) form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = (id) => Number(document.getElementById(id).value);
    const r = await WB.call("POST", "/api/audit/sample", { round: v("round"), n: v("n"), seed: v("seed") });
    location.href = r.url;
  });
  const root = document.getElementById("audit");
  if (!root) return;
  for (const b of document.querySelectorAll("button.verdict")) {
    b.addEventListener("click", async () => {
      const r = await WB.call("POST", `/api/audit/${root.dataset.sample}/${root.dataset.index}`,
        { verdict: b.dataset.verdict, note: document.getElementById("note").value });
      location.href = r.next;
    });
  }
});
