// The review page's script: plain JavaScript, no library. User text is written with
// textContent / value only (never innerHTML), every state change goes to the JSON API with
// the page's token, and edits are saved as they are typed (debounced PATCH).
"use strict";

(() => {
  const token = document.body.dataset.token;
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const cardsEl = $("#cards");
  const template = $("#card-template");
  const SAVE_DELAY_MS = 400;
  const POLL_MS = 1000;
  const pendingEdits = new Map(); // card id -> {timer, fields}
  let current = null;
  let pollTimer = null;

  // --- API --------------------------------------------------------------------------------

  async function api(method, url, body) {
    const options = {method, headers: {"X-Review-Token": token}};
    if (body instanceof FormData) {
      options.body = body;
    } else if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (err) {
      return {ok: false, status: 0, data: {message: "the review server does not answer: " + err}};
    }
    let data = {};
    try {
      data = await response.json();
    } catch (err) {
      data = {message: "HTTP " + response.status};
    }
    return {ok: response.ok, status: response.status, data};
  }

  // A POSIX shell word: left bare when it is only safe characters, else in single quotes.
  function shellQuote(text) {
    return /^[A-Za-z0-9_.\/:=@%+-]+$/.test(text) ? text : "'" + text.replace(/'/g, "'\\''") + "'";
  }

  function showError(el, message) {
    el.textContent = message || "";
    el.hidden = !message;
  }

  // --- cards ------------------------------------------------------------------------------

  function ensureTypeOption(select, type) {
    if (type && !$$("option", select).some((o) => o.value === type)) {
      const option = document.createElement("option");
      option.value = type;
      option.textContent = type;
      select.prepend(option);
    }
  }

  function setCardStatus(node, card) {
    node.dataset.status = card.status;
    node.classList.remove("status-pending", "status-approved", "status-rejected");
    node.classList.add("status-" + card.status);
    $(".badge-status", node).textContent = card.status;
    $(".badge-edited", node).hidden = !card.edited;
  }

  function fillCard(node, card) {
    node.dataset.id = card.id;
    node.dataset.type = card.question_type || "";
    $(".card-id", node).textContent = card.id;
    const select = $(".f-type", node);
    ensureTypeOption(select, card.question_type);
    select.value = card.question_type || "";
    $(".f-answerable", node).checked = !!card.answerable;
    $(".f-question", node).value = card.user_input;
    $(".f-reference", node).value = card.reference;
    $(".src-doc", node).textContent = card.source || card.doc_id || "unknown";
    $(".src-page", node).textContent = card.page ? ", page " + card.page : "";
    const excerpts = $(".excerpts", node);
    excerpts.replaceChildren(...card.reference_contexts.map((text) => {
      const quote = document.createElement("blockquote");
      quote.textContent = text;
      return quote;
    }));
    setCardStatus(node, card);
  }

  function cardNode(id) {
    return $$(".card", cardsEl).find((node) => node.dataset.id === id) || null;
  }

  function addCards(cards) {
    for (const card of cards) {
      if (cardNode(card.id)) continue;
      const node = template.content.firstElementChild.cloneNode(true);
      fillCard(node, card);
      cardsEl.append(node);
    }
    $("#no-cards").hidden = $$(".card", cardsEl).length > 0;
    applyFilters();
  }

  async function loadCards() {
    const result = await api("GET", "/cards");
    if (result.ok) addCards(result.data.cards);
  }

  function markSaving(node, text, failed) {
    const el = $(".save-state", node);
    el.textContent = text;
    el.classList.toggle("failed", !!failed);
  }

  async function patchCard(node, fields) {
    const id = node.dataset.id;
    markSaving(node, "saving …");
    const result = await api("PATCH", "/cards/" + encodeURIComponent(id), fields);
    if (!result.ok) {
      markSaving(node, "not saved: " + (result.data.message || result.status), true);
      return null;
    }
    markSaving(node, "saved");
    setCardStatus(node, result.data.card);
    node.dataset.type = result.data.card.question_type || "";
    refreshStats();
    return result.data.card;
  }

  function scheduleEdit(node, field, value) {
    const id = node.dataset.id;
    const entry = pendingEdits.get(id) || {timer: null, fields: {}};
    entry.fields[field] = value;
    clearTimeout(entry.timer);
    entry.timer = setTimeout(() => flushEdit(id), SAVE_DELAY_MS);
    pendingEdits.set(id, entry);
    markSaving(node, "editing …");
  }

  async function flushEdit(id) {
    const entry = pendingEdits.get(id);
    if (!entry) return;
    pendingEdits.delete(id);
    clearTimeout(entry.timer);
    const node = cardNode(id);
    if (node) await patchCard(node, entry.fields);
  }

  async function flushAll() {
    await Promise.all(Array.from(pendingEdits.keys()).map(flushEdit));
  }

  async function setStatus(node, status) {
    if (!node) return;
    await flushEdit(node.dataset.id);
    const card = await patchCard(node, {status});
    if (card) {
      $(".problems", node).replaceChildren();
      if (!isVisible(node)) applyFilters();
    }
  }

  // --- selection, filters, keyboard -------------------------------------------------------

  function isVisible(node) {
    const type = $("#filter-type").value;
    const status = $("#filter-status").value;
    return (!type || node.dataset.type === type) && (!status || node.dataset.status === status);
  }

  function visibleCards() {
    return $$(".card", cardsEl).filter((node) => !node.hidden);
  }

  function applyFilters() {
    for (const node of $$(".card", cardsEl)) node.hidden = !isVisible(node);
    if (current && current.hidden) select(null);
    if (!current) {
      const first = visibleCards()[0];
      if (first) select(first, false);
    }
  }

  function select(node, scroll = true) {
    if (current) current.classList.remove("current");
    current = node;
    if (!node) return;
    node.classList.add("current");
    if (scroll) node.scrollIntoView({block: "nearest", behavior: "smooth"});
  }

  function move(delta) {
    const cards = visibleCards();
    if (!cards.length) return;
    const index = cards.indexOf(current);
    const next = index < 0 ? 0 : Math.min(cards.length - 1, Math.max(0, index + delta));
    select(cards[next]);
    cards[next].focus({preventScroll: true});
  }

  function decide(status) {
    // Move on at once (the next key press acts on the next card), then save the decision.
    const node = current;
    if (!node) return;
    const cards = visibleCards();
    const following = cards[cards.indexOf(node) + 1] || null;
    if (following) {
      select(following);
      following.focus({preventScroll: true});
    }
    setStatus(node, status);
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target.closest && target.closest("input, textarea, select, button")) {
      if (event.key === "Escape" && target.closest(".card")) {
        target.blur();
        const node = target.closest(".card");
        select(node, false);
        node.focus({preventScroll: true});
      }
      if (!target.closest("button")) return;
    }
    const actions = {
      a: () => decide("approved"),
      r: () => decide("rejected"),
      j: () => move(1), n: () => move(1),
      k: () => move(-1), p: () => move(-1),
      e: () => { if (current) $(".f-question", current).focus(); },
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  });

  cardsEl.addEventListener("click", (event) => {
    const node = event.target.closest(".card");
    if (!node) return;
    if (node !== current) select(node, false);
    if (event.target.closest(".btn-approve")) setStatus(node, "approved");
    else if (event.target.closest(".btn-reject")) setStatus(node, "rejected");
    else if (event.target.closest(".btn-pending")) setStatus(node, "pending");
  });

  cardsEl.addEventListener("focusin", (event) => {
    const node = event.target.closest(".card");
    if (node && node !== current) select(node, false);
  });

  cardsEl.addEventListener("input", (event) => {
    const node = event.target.closest(".card");
    if (!node) return;
    if (event.target.matches(".f-question")) scheduleEdit(node, "user_input", event.target.value);
    if (event.target.matches(".f-reference")) scheduleEdit(node, "reference", event.target.value);
  });

  cardsEl.addEventListener("change", (event) => {
    const node = event.target.closest(".card");
    if (!node) return;
    if (event.target.matches(".f-type")) patchCard(node, {question_type: event.target.value});
    if (event.target.matches(".f-answerable")) patchCard(node, {answerable: event.target.checked});
  });

  $("#filter-type").addEventListener("change", applyFilters);
  $("#filter-status").addEventListener("change", applyFilters);

  window.addEventListener("beforeunload", () => {
    for (const [id, entry] of pendingEdits) {
      clearTimeout(entry.timer);
      fetch("/cards/" + encodeURIComponent(id), {
        method: "PATCH", keepalive: true,
        headers: {"X-Review-Token": token, "Content-Type": "application/json"},
        body: JSON.stringify(entry.fields),
      });
    }
    pendingEdits.clear();
  });

  // --- stats ------------------------------------------------------------------------------

  async function refreshStats() {
    const result = await api("GET", "/stats");
    if (!result.ok) return;
    const stats = result.data;
    $("#st-total").textContent = stats.total;
    $("#st-approved").textContent = stats.by_status.approved;
    $("#st-rejected").textContent = stats.by_status.rejected;
    $("#st-pending").textContent = stats.by_status.pending;
    $("#st-edited").textContent = stats.edited;
  }

  // --- upload -----------------------------------------------------------------------------

  function showUploads(names) {
    $("#uploads").replaceChildren(...names.map((name) => {
      const item = document.createElement("li");
      item.textContent = name;
      return item;
    }));
  }

  $("#upload-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("#files");
    if (!input.files.length) {
      showError($("#upload-error"), "Choose one or more files first.");
      return;
    }
    const maxMb = Number($("#upload-form").dataset.maxMb);
    const total = Array.from(input.files).reduce((sum, file) => sum + file.size, 0);
    if (total > maxMb * 1024 * 1024) {  // the server refuses it too (413), without reading it
      showError($("#upload-error"), "Upload refused: " + (total / 1048576).toFixed(1) +
        " MB is over the limit of " + maxMb + " MB (rag-exp review --max-upload-mb).");
      return;
    }
    const form = new FormData();
    for (const file of input.files) form.append("files", file, file.name);
    const result = await api("POST", "/upload", form);
    if (!result.ok) {
      showError($("#upload-error"), result.data.message || "upload failed (HTTP " + result.status + ")");
      return;
    }
    showError($("#upload-error"), "");
    showUploads(result.data.uploads);
    input.value = "";
  });

  // --- generate ---------------------------------------------------------------------------

  const llmDefaults = JSON.parse($("#llm-defaults").textContent);

  function showModelFields() {
    const option = $("#llm").value;
    const defaults = llmDefaults[option] || {};
    for (const label of $$("[data-field]")) {
      const field = label.dataset.field;
      label.hidden = !(field in defaults);
      if (field in defaults) $("input", label).value = defaults[field];
    }
  }

  $("#llm").addEventListener("change", showModelFields);
  showModelFields();

  $("#generate-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const body = {
      n: Number(form.elements.n.value),
      n_unanswerable: Number(form.elements.n_unanswerable.value),
      attempt_factor: Number(form.elements.attempt_factor.value),
      types: $$("input[name=types]:checked", form).map((box) => box.value),
      llm: form.elements.llm.value,
      start_over: form.elements.start_over.checked,
    };
    for (const label of $$("[data-field]", form)) {
      if (!label.hidden) body[label.dataset.field] = $("input", label).value;
    }
    $("#btn-generate").disabled = true;
    const result = await api("POST", "/generate", body);
    if (!result.ok) {
      $("#btn-generate").disabled = false;
      showError($("#generate-error"), result.data.message || "HTTP " + result.status);
      return;
    }
    showError($("#generate-error"), "");
    form.elements.start_over.checked = false;
    if (body.start_over) {
      for (const node of $$(".card", cardsEl)) node.remove();
      current = null;
    }
    showJob(result.data);
    poll();
  });

  $("#btn-cancel").addEventListener("click", async () => {
    $("#btn-cancel").disabled = true;
    const result = await api("POST", "/cancel");
    if (result.ok) showJob(result.data.job);
  });

  function showProgress(progress) {
    const table = $("#progress");
    if (!progress) {
      table.hidden = true;
      return;
    }
    const types = new Set([
      ...Object.keys(progress.accepted), ...Object.keys(progress.unanswerable),
      ...Object.keys(progress.rejected), ...Object.keys(progress.remaining),
    ]);
    const rows = Array.from(types).sort().map((type) => {
      const row = document.createElement("tr");
      for (const value of [type, progress.accepted[type] || 0, progress.unanswerable[type] || 0,
        progress.rejected[type] || 0, progress.remaining[type] || 0]) {
        const cell = document.createElement("td");
        cell.textContent = value;
        row.append(cell);
      }
      return row;
    });
    const total = document.createElement("tr");
    total.className = "total";
    const sum = (counts) => Object.values(counts).reduce((a, b) => a + b, 0);
    for (const value of ["all", sum(progress.accepted) + " / " + progress.n_wanted,
      sum(progress.unanswerable) + " / " + progress.n_unanswerable_wanted,
      sum(progress.rejected), sum(progress.remaining)]) {
      const cell = document.createElement("td");
      cell.textContent = value;
      total.append(cell);
    }
    $("tbody", table).replaceChildren(...rows, total);
    table.hidden = false;
  }

  function showJob(job) {
    const running = job.state === "running";
    $("#btn-generate").disabled = running;
    $("#btn-cancel").disabled = !running;
    let message = job.message || "No generation yet.";
    if (running && job.progress) {
      message = "Generating: " + job.progress.attempts_done + " of " +
        job.progress.attempts_planned + " planned attempts made …";
    } else if (running) {
      // before the first attempt: reading documents, building the index, loading the model
      const elapsed = job.started_at ? Math.round(Date.now() / 1000 - job.started_at) : 0;
      message = "Preparing (" + elapsed + " s): " + (job.stage || "starting …");
    }
    const rejects = (job.progress && job.progress.rejected_by_reason) || job.rejects_by_reason || {};
    const reasons = Object.entries(rejects).sort((a, b) => b[1] - a[1]);
    if (reasons.length && !message.includes("Rejected attempts by reason")) {
      message += " Rejected attempts by reason: " +
        reasons.map(([reason, n]) => reason + " " + n).join(", ") + ".";
    }
    const el = $("#job-message");
    el.textContent = message;
    el.className = "job-message state-" + job.state;
    document.body.dataset.job = job.state;
    showProgress(job.progress);
    const link = $("#mlflow-link");
    link.hidden = !job.mlflow_url;
    if (job.mlflow_url) link.href = job.mlflow_url;
  }

  async function poll() {
    clearTimeout(pollTimer);
    const result = await api("GET", "/progress");
    if (result.ok) {
      const job = result.data.job;
      if (result.data.n_cards !== $$(".card", cardsEl).length) await loadCards();
      showJob(job);
      refreshStats();
      if (job.state === "running") {
        pollTimer = setTimeout(poll, POLL_MS);
        return;
      }
    } else {
      pollTimer = setTimeout(poll, POLL_MS * 3);
    }
  }

  // --- save -------------------------------------------------------------------------------

  $("#btn-save").addEventListener("click", async (event) => {
    const button = event.currentTarget;
    if (button.disabled) return;
    button.disabled = true; // one save at a time (a double click)
    try {
      await save();
    } finally {
      button.disabled = false;
    }
  });

  async function save() {
    await flushAll();
    for (const node of $$(".card", cardsEl)) $(".problems", node).replaceChildren();
    const out = $("#save-result");
    out.className = "save-result";
    out.textContent = "Saving …";
    $("#run-command").hidden = true;
    const result = await api("POST", "/save");
    if (result.ok) {
      out.classList.add("ok");
      out.textContent = "Saved " + result.data.n_written + " approved pairs to " + result.data.path + ".";
      const command = $("#run-command");
      command.textContent = "rag-exp run dataset=jsonl dataset.path=" + shellQuote(result.data.path) +
        " dataset.corpus=" + (result.data.corpus ? shellQuote(result.data.corpus) : "<your documents folder>");
      command.hidden = false;
      return;
    }
    out.classList.add("failed");
    const failures = result.data.failures || {};
    const ids = Object.keys(failures);
    if (!ids.length) {
      out.textContent = result.data.message || "Save failed (HTTP " + result.status + ").";
      return;
    }
    out.textContent = "Nothing was written: " + ids.length +
      " approved card(s) fail validation. Fix or reject them, then save again: " + ids.join(", ");
    for (const id of ids) {
      const node = cardNode(id);
      if (!node) continue;
      $(".problems", node).replaceChildren(...failures[id].map((text) => {
        const item = document.createElement("li");
        item.textContent = text;
        return item;
      }));
    }
    const first = cardNode(ids[0]);
    if (first) select(first);
  }

  // --- start ------------------------------------------------------------------------------

  showJob(JSON.parse($("#job-state").textContent));
  loadCards().then(() => {
    applyFilters();
    poll();
  });
})();
