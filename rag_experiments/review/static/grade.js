// The grading page (templates/grade.html): one row at a time, verdicts 1/0 per metric, blind
// to the judge until the row is submitted. User text is written with textContent only; every
// POST carries the page's token. Labels live on the server (fsync'd before it answers), so a
// closed tab loses nothing: reopening starts at the first row this grader has not submitted.
"use strict";
(() => {
  const token = document.body.dataset.token;
  const metrics = document.body.dataset.metrics.split(",");
  const $ = (id) => document.getElementById(id);
  const nameBox = $("grader");
  let items = [];
  let pos = 0;
  let pending = {};

  const grader = () => nameBox.value.trim();
  const say = (text) => { $("message").textContent = text; };

  async function load() {
    if (!grader()) { say("Type your name to start grading."); $("row").hidden = true; return; }
    const res = await fetch("items?grader=" + encodeURIComponent(grader()));
    const body = await res.json();
    items = body.items;
    const open = items.findIndex((it) => !it.judge);
    pos = open < 0 ? 0 : open;
    pending = {};
    render();
    loadAgreement();
  }

  function render() {
    const it = items[pos];
    if (!it) { $("row").hidden = true; return; }
    $("row").hidden = false;
    const row = $("row");
    row.dataset.id = it.id;
    row.dataset.submitted = it.judge ? "1" : "0";
    $("row-pos").textContent = `row ${pos + 1} of ${items.length}`;
    $("row-id").textContent = it.id;
    $("row-type").textContent = it.question_type || "";
    $("question").textContent = it.question;
    $("answer").textContent = it.answer;
    $("reference").textContent = it.reference;
    const list = $("contexts");
    list.replaceChildren(...it.contexts.map((c) => {
      const li = document.createElement("li");
      li.textContent = c;
      return li;
    }));
    const chosen = it.judge ? it.labels : pending;
    const next = metrics.find((m) => !(m in chosen));
    for (const tr of document.querySelectorAll("#verdicts tbody tr")) {
      const m = tr.dataset.metric;
      tr.classList.toggle("current", !it.judge && m === next);
      tr.classList.toggle("done", Boolean(it.judge));
      for (const b of tr.querySelectorAll("button.v")) {
        b.classList.toggle("chosen", m in chosen && String(chosen[m]) === b.dataset.v
          || m in chosen && Number(chosen[m]) === Number(b.dataset.v));
      }
      const j = it.judge ? it.judge[m] : undefined;
      tr.querySelector(".judge").textContent =
        it.judge ? (j === null ? "no verdict" : String(j)) : "hidden";
    }
    const done = items.filter((x) => x.judge).length;
    $("progress").textContent = `${done} of ${items.length} graded by you`;
  }

  async function give(metric, value) {
    const it = items[pos];
    if (!it || it.judge || !grader()) return;
    pending[metric] = value;
    render();
    if (!metrics.every((m) => m in pending)) return;
    const labels = pending;
    const res = await fetch("label", {
      method: "POST",
      headers: {"X-Review-Token": token, "Content-Type": "application/json"},
      body: JSON.stringify({grader: grader(), id: it.id, labels}),
    });
    const body = await res.json();
    if (!res.ok) { say(body.message || "not saved"); return; }
    it.labels = labels;
    it.judge = body.judge;
    pending = {};
    say(`saved ${it.id}`);
    render();
    showAgreement(body.agreement);
  }

  function showAgreement(rows) {
    $("agreement").querySelector("tbody").replaceChildren(...rows.map((r) => {
      const tr = document.createElement("tr");
      for (const v of [r.metric, r.a, r.b, r.n, r.raw, r.kappa]) {
        const td = document.createElement("td");
        td.textContent = v === null ? "–" : String(v);
        tr.appendChild(td);
      }
      return tr;
    }));
  }

  async function loadAgreement() {
    const res = await fetch("agreement");
    if (res.ok) showAgreement((await res.json()).agreement);
  }

  function move(step) {
    if (!items.length) return;
    pos = Math.max(0, Math.min(items.length - 1, pos + step));
    pending = {};
    render();
  }

  document.addEventListener("keydown", (e) => {
    if (e.target === nameBox || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "n") move(1);
    else if (e.key === "p") move(-1);
    else if (e.key === "1" || e.key === "0") {
      const it = items[pos];
      if (!it || it.judge) return;
      const m = metrics.find((x) => !(x in pending));
      if (m) give(m, Number(e.key));
    }
  });
  for (const tr of document.querySelectorAll("#verdicts tbody tr")) {
    for (const b of tr.querySelectorAll("button.v")) {
      b.addEventListener("click", () => give(tr.dataset.metric, Number(b.dataset.v)));
    }
  }
  $("prev").addEventListener("click", () => move(-1));
  $("next").addEventListener("click", () => move(1));
  nameBox.value = localStorage.getItem("rag-exp-grader") || "";
  nameBox.addEventListener("change", () => {
    localStorage.setItem("rag-exp-grader", grader());
    load();
  });
  load();
})();
