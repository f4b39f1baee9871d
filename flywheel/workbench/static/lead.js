"use strict";
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("assign").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = (id) => document.getElementById(id).value;
    const r = await WB.call("POST", "/api/assign", { annotator: v("annotator"), n: Number(v("n")), seed: Number(v("seed")), mode: v("mode") });
    WB.say(`${r.length} task(s) assigned to ${v("annotator")}`);
    location.reload();
  });
});
