// Follows the run without reloading the page: its status every POLL_MS (a quarter of a second),
// every SOON_MS once the job is writing the report (it is published a moment later), so the page
// learns of the published run about that long after it happened; once it has finished, the
// page's results are fetched and swapped in once (charts and tables are rendered on the server).
(function () {
  const POLL_MS = 250, SOON_MS = 100;
  const box = document.getElementById("run-progress");
  let shownPct = 0;
  const $ = (id) => document.getElementById(id);
  const size = (b) => b >= 1e9 ? (b / 1e9).toFixed(1) + " GB" : b >= 1e6 ? (b / 1e6).toFixed(1) + " MB" : b >= 1e3 ? (b / 1e3).toFixed(1) + " kB" : b + " B";
  async function tick() {
    let s;
    try { s = await (await fetch(box.dataset.statusUrl, {headers: {"Accept": "application/json"}})).json(); }
    catch (e) { return setTimeout(tick, 2000); }
    // The stages so far, each with how long it took (the one under way without).
    const stages = $("run-stages");
    stages.replaceChildren(...(s.stages || []).map((st) => {
      const li = document.createElement("li");
      li.dataset.stage = st.stage;
      li.textContent = st.words;
      if (st.seconds != null) {
        const sec = document.createElement("span");
        sec.className = "seconds";
        sec.textContent = " " + st.seconds.toFixed(2) + " s";
        li.append(sec);
      }
      return li;
    }));
    const p = s.progress || {};
    $("run-status").textContent = s.status_display;
    $("run-status").className = "status status-" + s.status;
    // The facts above the progress, as they are now (a page opened while queued said "Started –").
    $("run-started").textContent = s.started_at || "–";
    $("run-finished").textContent = s.finished_at || "–";
    if (s.finished) {
      const page = new DOMParser().parseFromString(await (await fetch(location.href)).text(), "text/html");
      // The usage part of the console page (the admin theme around it stays as it is).
      document.querySelector("div.usage").replaceWith(page.querySelector("div.usage"));
      if (window.consoleScrollHints) window.consoleScrollHints();  // console.js: the new tables' scroll fades
      return;
    }
    $("progress-step").textContent = s.step_words;
    $("progress-stepno").textContent = p.step_no ? "(step " + p.step_no + " of " + p.steps + ")" : "";
    $("progress-tasks").textContent = (p.tasks_done || 0) + " of " + (p.tasks_total || 0);
    $("progress-rows").textContent = p.rows_total != null ? p.rows_total.toLocaleString() : "–";
    $("progress-bytes").textContent = p.bytes_read ? size(p.bytes_read) : "–";
    $("progress-elapsed").textContent = s.elapsed_s != null ? Math.round(s.elapsed_s) + " s" : "–";
    $("progress-typical").textContent = s.typical_s != null ? Math.round(s.typical_s) + " s" : "–";
    $("run-duration").textContent = s.elapsed_s != null ? Math.round(s.elapsed_s) + " s so far" : "–";
    const within = p.steps ? ((p.step_no - 1) + (p.tasks_total ? p.tasks_done / p.tasks_total : 0)) / p.steps : 0;
    // Never backwards: Spark adds stages to an operation as it plans them (tasks_total grows).
    shownPct = Math.max(shownPct, Math.min(100, Math.round(within * 100)));
    $("progress-bar").style.width = shownPct + "%";
    if (s.cancel_requested && $("cancel-box")) { $("cancel-box").hidden = true; $("cancelling").hidden = false; }
    setTimeout(tick, p.step === "writing the report" ? SOON_MS : POLL_MS);
  }
  tick();
})();
