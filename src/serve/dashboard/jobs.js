// The jobs table and the queue line. Rows are kept per job id and updated in place, so that a
// button keeps its place (and focus) across polls. Every field is set as text, never as HTML:
// commands come from users.

// Buttons of every row: data-action is what dashboard.js does on a click.
const kActions = [
  { action: "curves", text: "Curves", title: "Show this job's training curves" },
  { action: "stop", text: "Stop", title: "Stop the job (SIGTERM; a queued job ends at once)" },
  { action: "snapshot", text: "Snapshot", title: "Ask the job to save a snapshot" },
  { action: "backup", text: "Backup", title: "Download the job's backup (.tar.gz)" },
];

function shellWord(w) {
  return /^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, "'\\''")}'`;
}

// The command as a shell would take it: words quoted where needed, each kept on one line.
function setCommand(cell, words) {
  const quoted = words.map(shellWord);
  if (cell.textContent === quoted.join(" ")) return;
  cell.replaceChildren(...quoted.flatMap((w, i) => {
    const span = document.createElement("span");
    span.className = "word";
    span.textContent = w;
    return i ? [" ", span] : [span];
  }));
}

function newRow(id, onAction) {
  const row = document.createElement("tr");
  row.dataset.jobId = id;
  for (let i = 0; i < 8; ++i) row.append(document.createElement("td"));
  const cell = document.createElement("td");
  for (const a of kActions) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = a.text;
    button.title = a.title;
    button.dataset.action = a.action;
    button.setAttribute("aria-label", `${a.text} job ${id}`);
    button.addEventListener("click", () => onAction(a.action, id));
    cell.append(button);
  }
  row.append(cell);
  return row;
}

function fill(row, job) {
  const values = [
    job.id, job.user, job.state, null, job.workers, job.devices.join(", ") || "-",
    job.ports.join(", ") || "-", job.exit_code === null ? "-" : job.exit_code,
  ];
  values.forEach((v, i) => {
    const text = String(v);
    if (v !== null && row.cells[i].textContent !== text) row.cells[i].textContent = text;
  });
  setCommand(row.cells[3], job.command);
  row.dataset.state = job.state;
  row.cells[2].className = `state ${job.state}`;
  row.querySelector('[data-action="stop"]').disabled = job.state === "ended";
}

// Shows `jobs` (the API's list) in `tbody`, newest first; `onAction(action, id)` on a click.
export function renderJobs(tbody, jobs, onAction) {
  const rows = new Map([...tbody.rows].map((r) => [Number(r.dataset.jobId), r]));
  const sorted = [...jobs].sort((a, b) => b.id - a.id);
  sorted.forEach((job, i) => {
    const row = rows.get(job.id) || newRow(job.id, onAction);
    rows.delete(job.id);
    fill(row, job);
    if (tbody.rows[i] !== row) tbody.insertBefore(row, tbody.rows[i] || null);
  });
  for (const gone of rows.values()) gone.remove();
}

// The queue in the order it will run (first come, first served: by id).
export function renderQueue(element, jobs) {
  const queued = jobs.filter((j) => j.state === "queued").sort((a, b) => a.id - b.id);
  const running = jobs.filter((j) => j.state === "running" || j.state === "stopping").length;
  element.dataset.queued = queued.length;
  const workers = (n) => `${n} worker${n === 1 ? "" : "s"}`;
  const waiting = queued.map((j) => `#${j.id} (${j.user}, ${workers(j.workers)})`).join(", ");
  element.textContent = `${running} running. Queue: ${waiting || "empty"}`;
}
