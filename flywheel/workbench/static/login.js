"use strict";
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await WB.call("POST", "/api/login", {
      username: document.getElementById("username").value, password: document.getElementById("password").value,
    });
    location.href = r.next;
  });
});
