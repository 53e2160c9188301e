// Device use over time: each poll of GET /api/v1/host (CPU %, memory, per-GPU utilization and
// memory) adds a sample to a rolling history kept in the page; the service keeps none.
// #host carries data-samples (samples held) for tests and scripts.

import { call } from "./api.js";
import { lineChart, setPoints } from "./charts.js";

const kSamples = 150; // 5 minutes at one poll every 2 s

function percent(part, whole) {
  return whole > 0 ? (100 * part) / whole : null;
}

export class HostHistory {
  constructor(section) {
    this.section = section;
    this.now = section.querySelector("#host-now");
    this.chart = lineChart(section.querySelector("#host-chart"), {
      series: ["CPU", "memory"], xTitle: "time", yTitle: "% in use", yMax: 100,
    });
    this.samples = []; // {time, values: [cpu %, memory %, gpu0 %, gpu0 memory %, ...]}
    this.names = ["CPU", "memory"];
  }

  async poll() {
    const host = await call("GET", "/api/v1/host");
    this.names = ["CPU", "memory"];
    const values = [host.cpu_pct, percent(host.memory_used_gib, host.memory_total_gib)];
    for (const g of host.gpus) {
      this.names.push(`GPU ${g.index}`, `GPU ${g.index} memory`);
      values.push(g.utilization_pct, percent(g.memory_used_mib, g.memory_total_mib));
    }
    this.samples.push({ time: new Date().toLocaleTimeString(), values });
    if (this.samples.length > kSamples) this.samples.shift();
    this.section.dataset.samples = this.samples.length;
    this.show(host);
  }

  show(host) {
    const columns = this.names.map((_, i) => this.samples.map((s) => s.values[i] ?? null));
    setPoints(this.chart, this.samples.map((s) => s.time), columns, this.names);
    const parts = [
      `CPU ${host.cpu_pct.toFixed(0)}% of ${host.cores} cores`,
      `memory ${host.memory_used_gib.toFixed(1)} of ${host.memory_total_gib.toFixed(1)} GiB`,
    ];
    for (const g of host.gpus) {
      const modes = g.compute_partition ? ` (${g.compute_partition}/${g.memory_partition})` : "";
      parts.push(`GPU ${g.index}${modes}: ${g.utilization_pct.toFixed(0)}%, ` +
                 `${(g.memory_used_mib / 1024).toFixed(1)} of ` +
                 `${(g.memory_total_mib / 1024).toFixed(1)} GiB, ` +
                 `${g.temperature_c.toFixed(0)} °C, ${g.power_w.toFixed(0)} W`);
    }
    if (!host.gpus.length) parts.push("no GPU");
    this.now.textContent = parts.join(" · ");
  }
}
