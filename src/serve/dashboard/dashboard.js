// The dashboard's main loop: sign in with a token, then every kPollMs read the jobs, the picked
// job's curves and the host, and run the buttons' actions. A failed call shows the API's error
// in #error; a refused token (401) signs out.

import { ApiError, call, download, setToken, token } from "./api.js";
import { chartsAvailable } from "./charts.js";
import { Curves } from "./curves.js";
import { HostHistory } from "./host.js";
import { renderJobs, renderQueue } from "./jobs.js";

const kPollMs = 2000;

const $ = (id) => document.getElementById(id);
let curves, host;
let timer = null;
let session = 0; // counts sign-ins and sign-outs: a poll of an older one stops
let jobs = [];

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function say(message) {
  $("status").textContent = message;
}

function signedIn(yes) {
  $("login").dataset.signedIn = yes;
  $("main").hidden = !yes;
  $("sign-in-fields").hidden = yes;
  $("sign-out").hidden = !yes;
  clearTimeout(timer);
  ++session;
}

// The job whose curves to show when none was picked: the newest running one, else the newest.
function defaultJob() {
  const running = jobs.filter((j) => j.state === "running");
  const pick = running.length ? running : jobs;
  return pick.length ? Math.max(...pick.map((j) => j.id)) : null;
}

async function poll() {
  const mine = session;
  try {
    jobs = await call("GET", "/api/v1/jobs");
    renderJobs($("jobs").tBodies[0], jobs, act);
    renderQueue($("queue"), jobs);
    $("no-jobs").hidden = jobs.length > 0;
    if (!curves.picked || !jobs.some((j) => j.id === curves.jobId)) curves.select(defaultJob());
    await Promise.all([curves.poll(jobs), host.poll()]);
    if (mine !== session) return;
    if ($("error").dataset.from === "poll") showError("");
  } catch (e) {
    if (mine !== session) return;
    if (e instanceof ApiError && e.status === 401) return signOut(e.message);
    showError(e.message);
    $("error").dataset.from = "poll";
  }
  timer = setTimeout(poll, kPollMs);
}

async function act(action, id) {
  showError("");
  try {
    if (action === "curves") {
      curves.select(id, /*picked=*/true);
      say(`Job ${id}: showing its curves.`);
      await curves.poll(jobs);
    } else if (action === "stop") {
      const job = await call("POST", `/api/v1/jobs/${id}/stop`);
      say(`Job ${id}: stop sent; it is ${job.state}.`);
    } else if (action === "snapshot") {
      const reply = await call("POST", `/api/v1/jobs/${id}/snapshots`);
      say(`Job ${id}: snapshot requested: ${JSON.stringify(reply)}`);
    } else if (action === "backup") {
      say(`Job ${id}: downloading its backup...`);
      const { blob, name } = await download(`/api/v1/jobs/${id}/backup`, `ddpx-job-${id}.tar.gz`);
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = name;
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 60000);
      say(`Job ${id}: backup saved as ${name} (${blob.size} bytes).`);
    }
  } catch (e) {
    say("");
    showError(`Job ${id}: ${action} failed: ${e.message}`);
    $("error").dataset.from = "action";
  }
}

async function signIn(value) {
  setToken(value);
  showError("");
  try {
    await call("GET", "/api/v1/jobs"); // checks the token before showing anything
  } catch (e) {
    return signOut(e.message);
  }
  signedIn(true);
  say("");
  poll();
}

function signOut(message) {
  setToken("");
  signedIn(false);
  showError(message || "");
  $("error").dataset.from = "sign-in";
  say(message ? "" : "Signed out.");
}

document.addEventListener("DOMContentLoaded", () => {
  $("charts-note").hidden = chartsAvailable();
  curves = new Curves($("curves"));
  host = new HostHistory($("host"));
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    $("token").value = "";
    if (!value) return showError("Give a token (ddpx serve token add USER prints one).");
    signIn(value);
  });
  $("sign-out").addEventListener("click", () => signOut(""));
  if (token()) signIn(token());
  else $("token").focus();
});
