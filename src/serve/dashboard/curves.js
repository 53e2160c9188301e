// One job's training curves: loss, and train and test accuracy per epoch, from
// GET /api/v1/jobs/{id}/metrics. Polled while the job runs, once more when it has ended.
// #curves carries data-job-id and data-points (epochs shown) for tests and scripts.

import { call } from "./api.js";
import { lineChart, setPoints } from "./charts.js";

const kTableRows = 5; // the last epochs, newest first

function fixed(value, digits) {
  return typeof value === "number" ? value.toFixed(digits) : "-";
}

export class Curves {
  constructor(section) {
    this.section = section;
    this.caption = section.querySelector("#curves-caption");
    this.tbody = section.querySelector("#epochs tbody");
    this.loss = lineChart(section.querySelector("#loss-chart"),
                          { series: ["train loss"], xTitle: "epoch", yTitle: "loss" });
    this.accuracy = lineChart(section.querySelector("#accuracy-chart"), {
      series: ["train accuracy", "test accuracy"], xTitle: "epoch", yTitle: "accuracy", yMax: 1,
    });
    this.jobId = null;
    this.picked = false; // by the user (its Curves button), else the page's default
    this.endedShown = false; // the job had ended at the last reading: nothing more to read
  }

  select(jobId, picked = false) {
    this.picked = picked;
    if (jobId === this.jobId) return;
    this.jobId = jobId;
    this.endedShown = false;
    this.section.dataset.jobId = jobId ?? "";
    this.show({ state: "", epochs: [] });
  }

  // Reads the job's metrics unless they can no longer change; `jobs`: the API's job list.
  async poll(jobs) {
    const job = jobs.find((j) => j.id === this.jobId);
    if (!job || (job.state === "ended" && this.endedShown)) return;
    const id = this.jobId;
    const metrics = await call("GET", `/api/v1/jobs/${id}/metrics`);
    if (id !== this.jobId) return; // another job was picked meanwhile
    this.endedShown = metrics.state === "ended";
    this.show(metrics);
  }

  show({ state, epochs }) {
    const labels = epochs.map((e) => e.epoch);
    setPoints(this.loss, labels, [epochs.map((e) => e.loss_train)]);
    setPoints(this.accuracy, labels, [
      epochs.map((e) => e.accuracy_train),
      epochs.map((e) => e.accuracy_test ?? null),
    ]);
    this.section.dataset.points = epochs.length;
    const last = epochs[epochs.length - 1];
    this.caption.textContent = this.jobId === null ? "Pick a job's Curves button."
      : !last ? `Job ${this.jobId}${state ? ` (${state})` : ""}: no epoch finished yet.`
      : `Job ${this.jobId} (${state}): epoch ${last.epoch + 1} of ${last.epochs}, ` +
        `loss ${fixed(last.loss_train, 4)}, train accuracy ${fixed(last.accuracy_train, 4)}.`;
    this.tbody.replaceChildren(...epochs.slice(-kTableRows).reverse().map((e) => {
      const row = document.createElement("tr");
      for (const v of [e.epoch, fixed(e.time_s, 2), fixed(e.loss_train, 4),
                       fixed(e.accuracy_train, 4), fixed(e.accuracy_test, 4),
                       fixed(e.images_per_sec, 0)]) {
        row.insertCell().textContent = String(v);
      }
      return row;
    }));
  }
}
