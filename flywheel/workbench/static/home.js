"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const b of document.querySelectorAll("button.start")) {
    b.addEventListener("click", async () => {
      const r = await WB.call("POST", "/api/live", { assignment_id: b.dataset.assignment });
      location.href = r.url;
    });
  }
});
