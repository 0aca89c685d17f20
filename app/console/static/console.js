// The console's shared scripts: the session's CSRF token, JSON calls to /v1, copy buttons,
// JSON fields checked as they are typed, and a reader for streamed (SSE) answers.
// Pages work without it; it only adds what a plain form cannot do.
"use strict";

const genai = (() => {
  const csrf = () => document.querySelector("main")?.dataset.csrf || "";

  async function call(method, path, body) {
    const response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf() },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = { raw: text }; }
    return { ok: response.ok, status: response.status, data };
  }

  // Reads a text/event-stream answer, calling onEvent(name, data) for each event.
  async function stream(path, body, onEvent) {
    const response = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf(), accept: "text/event-stream" },
      body: JSON.stringify(body),
    });
    if (!response.ok || !response.body) {
      const text = await response.text();
      let data = null;
      try { data = JSON.parse(text); } catch (e) { data = { error: { type: "error", message: text } }; }
      onEvent("error", data);
      return response.status;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const lines = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) lines.push(line.slice(5).replace(/^ /, ""));
        }
        if (lines.length) onEvent(name, lines.join("\n"));
      }
    }
    return response.status;
  }

  function wireCopyButtons(root) {
    for (const button of root.querySelectorAll("button[data-copy-target]")) {
      button.addEventListener("click", async () => {
        const target = document.getElementById(button.dataset.copyTarget);
        if (!target) return;
        const value = target.value !== undefined ? target.value : target.textContent;
        try {
          await navigator.clipboard.writeText(value);
          button.textContent = "Copied";
        } catch (e) {
          if (target.select) target.select();
          button.textContent = "Select and copy";
        }
      });
    }
  }

  // <textarea data-json id="x"> with <p id="x-status" aria-live="polite">: checked as you type.
  function wireJsonFields(root) {
    for (const field of root.querySelectorAll("textarea[data-json]")) {
      const status = document.getElementById(field.id + "-status");
      const check = () => {
        const text = field.value.trim();
        if (!text) { field.removeAttribute("aria-invalid"); if (status) status.textContent = ""; return; }
        try {
          const value = JSON.parse(text);
          const wantObject = field.dataset.json === "object";
          if (wantObject && (value === null || typeof value !== "object" || Array.isArray(value))) {
            throw new Error("must be a JSON object, like {\"tone\": \"formal\"}");
          }
          field.removeAttribute("aria-invalid");
          if (status) { status.textContent = "Valid JSON"; status.className = "ok"; }
        } catch (e) {
          field.setAttribute("aria-invalid", "true");
          if (status) { status.textContent = "Not valid: " + e.message; status.className = "error"; }
        }
      };
      field.addEventListener("input", check);
      check();
    }
  }

  // A block that scrolls (a long prompt, a wide table on a phone) must take keyboard focus, or
  // a keyboard user cannot scroll it; one that fits stays out of the tab order.
  function focusScrollables() {
    for (const block of document.querySelectorAll("pre, .text, .table-wrap")) {
      const scrolls = block.scrollHeight > block.clientHeight + 1 || block.scrollWidth > block.clientWidth + 1;
      if (scrolls && !block.hasAttribute("tabindex")) block.setAttribute("tabindex", "0");
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    wireCopyButtons(document);
    wireJsonFields(document);
    focusScrollables();
  });
  window.addEventListener("resize", focusScrollables);

  return { csrf, call, stream, focusScrollables };
})();
window.genai = genai;
