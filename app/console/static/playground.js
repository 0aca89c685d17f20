// The playground's Run and Compare: the form's request streamed from /v1/completions (the
// session cookie and x-csrf-token authenticate it), deltas appended as they arrive, then the
// envelope's usage, cost, model and job link. Render, and Run without JavaScript, post the form.
// Everything shown goes in as text (textContent), never as HTML.
"use strict";

(() => {
  const form = document.getElementById("play");
  if (!form || !window.genai) return;

  // The variables as the server reads them (app/console/pages/playground_fields.py).
  function variables() {
    const values = {};
    const problems = [];
    for (const input of form.querySelectorAll("[data-var]")) {
      const name = input.dataset.var;
      const kind = input.dataset.kindFrom ? document.getElementById(input.dataset.kindFrom).value : input.dataset.kind;
      const text = input.value;
      if (kind === "boolean") { values[name] = input.checked; continue; }
      if (!text.trim()) continue; // left out: the default applies
      if (kind === "number") {
        const number = Number(text.trim());
        if (Number.isFinite(number)) values[name] = number;
        else problems.push(name + ": not a number");
      } else if (kind === "list") {
        values[name] = text.split("\n").map((line) => line.trim()).filter(Boolean);
      } else if (kind === "object") {
        try {
          const value = JSON.parse(text);
          if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("must be a JSON object");
          values[name] = value;
        } catch (e) { problems.push(name + ": " + e.message); }
      } else if (kind === "json") {
        try { values[name] = JSON.parse(text); } catch (e) { problems.push(name + ": " + e.message); }
      } else {
        values[name] = text;
      }
    }
    return { values, problems };
  }

  const field = (name) => form.elements.namedItem(name);
  const valueOf = (name) => { const f = field(name); return f ? f.value.trim() : ""; };

  function bodyFor(suffix, values) {
    const source = document.getElementById("play-source").value;
    const body = { variables: values, user_prompt: field("user_prompt").value, stream: true };
    if (form.dataset.source === "template") {
      const [name, role] = source.split("/");
      const template = { name, role };
      const version = valueOf("version_" + suffix);
      const label = valueOf("label_" + suffix);
      if (version) template.version = Number(version);
      if (label) template.label = label;
      body.template = template;
    } else {
      body.pattern_key = source;
    }
    const model = valueOf("model_" + suffix);
    if (model) body.model = model;
    return body;
  }

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (tag === "pre") node.tabIndex = 0; // a scrolling block must be reachable by keyboard
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  const pretty = (value) => JSON.stringify(value, null, 2);
  function prettyArguments(text) {
    try { return pretty(JSON.parse(text)); } catch (e) { return text; }
  }

  function column(suffix) {
    const get = (part) => document.getElementById("live-" + suffix + part);
    return { root: get(""), status: get("-status"), text: get("-text"), details: get("-details") };
  }

  function showError(col, status, data) {
    const error = (data && data.error) || {};
    col.status.textContent = "";
    const line = element("p", "", "error");
    line.setAttribute("role", "alert");
    line.append(element("code", error.type || "error"));
    line.append(" (" + status + "): " + (error.message || "the request failed"));
    col.details.append(line);
  }

  function showEnvelope(col, envelope) {
    const answer = envelope.response;
    const usage = answer.usage || {};
    if (answer.text && !col.text.textContent) col.text.textContent = answer.text;
    for (const call of answer.tool_calls || []) {
      col.details.append(element("h4", "Tool call: " + call.name));
      col.details.append(element("pre", prettyArguments(call.arguments), "text"));
    }
    if (envelope.parsed !== null && envelope.parsed !== undefined) {
      const valid = envelope.validation ? (envelope.validation.valid ? " (valid)" : " (invalid)") : "";
      col.details.append(element("h4", "Structured output" + valid));
      col.details.append(element("pre", pretty(envelope.parsed), "text"));
    }
    const facts = element("dl", undefined, "facts");
    const fact = (term, value) => {
      facts.append(element("dt", term));
      const dd = element("dd");
      dd.append(value);
      facts.append(dd);
    };
    fact("Model", answer.model + " (" + envelope.model_choice.source + ")");
    fact("Usage", (usage.input_tokens ?? "?") + " in, " + (usage.output_tokens ?? "?") + " out");
    fact("Cost", answer.cost_usd === null || answer.cost_usd === undefined ? "no price" : "$" + answer.cost_usd.toFixed(6));
    fact("Finish", answer.finish_reason);
    const link = element("a", envelope.job_id);
    link.href = "/console/jobs/" + encodeURIComponent(envelope.job_id);
    link.className = "job-link";
    fact("Job", link);
    col.details.append(facts);
    col.status.textContent = "Done.";
  }

  async function streamInto(suffix, body) {
    const col = column(suffix);
    col.root.hidden = false;
    col.text.textContent = "";
    col.details.replaceChildren();
    col.status.textContent = "Streaming…";
    col.text.setAttribute("aria-busy", "true");
    const answer = document.createTextNode("");
    col.text.append(answer);
    const calls = new Set();
    let failure = null;
    try {
      const status = await genai.stream("/v1/completions", body, (name, data) => {
        const event = typeof data === "string" ? JSON.parse(data) : data;
        if (name === "delta") answer.appendData(event.text);
        else if (name === "tool_call" && event.name && !calls.has(event.index)) {
          calls.add(event.index);
          col.status.textContent = "The model calls " + event.name + "…";
        } else if (name === "envelope") showEnvelope(col, event);
        else if (name === "error") failure = event;
      });
      // A refused request answers with its HTTP status; a failure mid-stream with an event.
      if (failure) showError(col, status === 200 ? "mid-stream" : status, failure);
    } catch (e) {
      showError(col, "network", { error: { type: "network_error", message: e.message } });
    } finally {
      col.text.setAttribute("aria-busy", "false");
    }
  }

  form.addEventListener("submit", async (event) => {
    const action = event.submitter ? event.submitter.value : "render";
    if (action !== "run" && action !== "compare") return; // render posts the form
    event.preventDefault();
    const note = document.getElementById("play-status");
    const { values, problems } = variables();
    if (problems.length) { note.textContent = "Fix first: " + problems.join("; "); note.className = "error"; return; }
    note.textContent = "";
    const posted = document.getElementById("runs");
    if (posted) posted.hidden = true; // an earlier answer posted without JavaScript
    const live = document.getElementById("live");
    live.hidden = false;
    document.getElementById("live-heading").textContent = action === "compare" ? "Comparison" : "Answer";
    const suffixes = action === "compare" ? ["a", "b"] : ["a"];
    column("b").root.hidden = action !== "compare";
    live.querySelector(".live").classList.toggle("grid2", action === "compare"); // one run: full width
    const buttons = form.querySelectorAll("button[type=submit]");
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await Promise.all(suffixes.map((suffix) => streamInto(suffix, bodyFor(suffix, values))));
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
})();
