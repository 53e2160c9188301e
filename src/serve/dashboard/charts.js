// Line charts with Chart.js (window.Chart, from /static/chart.js), or nothing when the service
// has no Chart.js: every function here then returns null or does nothing, and the page keeps
// its tables.

const kColors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"];

export function chartsAvailable() {
  return typeof window.Chart === "function";
}

function dataset(label, i) {
  const color = kColors[i % kColors.length];
  return { label, data: [], borderColor: color, backgroundColor: color, pointRadius: 2,
           spanGaps: true };
}

// A line chart on `canvas` with one dataset per name in `series`; null without Chart.js.
// `yMax`: a fixed top for the y axis (100 for percentages), else fitted to the data.
export function lineChart(canvas, { series, yTitle, xTitle, yMax }) {
  if (!chartsAvailable()) return null;
  return new window.Chart(canvas, {
    type: "line",
    data: {
      labels: [],
      datasets: series.map(dataset),
    },
    options: {
      animation: false, // redrawn every poll
      maintainAspectRatio: false,
      scales: {
        x: { title: { display: true, text: xTitle } },
        y: { title: { display: true, text: yTitle }, min: 0, max: yMax },
      },
    },
  });
}

// Replaces the chart's points: `labels` on x, `columns[i]` for dataset i. Datasets are added
// or dropped to match `names` (the host's GPUs are known only after the first reading).
export function setPoints(chart, labels, columns, names) {
  if (!chart) return;
  const datasets = chart.data.datasets;
  if (names) {
    datasets.length = Math.min(datasets.length, names.length);
    names.forEach((label, i) => {
      datasets[i] = datasets[i] || dataset(label, i);
      datasets[i].label = label;
    });
  }
  chart.data.labels = labels;
  columns.forEach((column, i) => {
    if (datasets[i]) datasets[i].data = column;
  });
  chart.update();
}
