// Pipeline schedules as action lists, and their simulation (see schedule.h).
#include "parallel/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ddpx::parallel {

std::string schedule_problem(PipelineSchedule schedule, const PipelineShape& shape) {
  if (shape.ranks < 1) return fmt::format("{} pipeline ranks; expected at least 1", shape.ranks);
  if (shape.microbatches < 1)
    return fmt::format("{} micro-batches; expected at least 1", shape.microbatches);
  if (schedule != PipelineSchedule::kInterleaved && shape.chunks != 1) {
    return fmt::format("{} stages a rank need --pipeline_schedule interleaved; {} runs one",
                       shape.chunks, name(schedule));
  }
  if (schedule == PipelineSchedule::k1F1B && shape.microbatches < shape.ranks) {
    return fmt::format(
        "1f1b needs at least one micro-batch a stage to fill the pipeline: {} micro-batches for "
        "{} stages; raise --microbatches to {} or use gpipe",
        shape.microbatches, shape.ranks, shape.ranks);
  }
  if (schedule == PipelineSchedule::kInterleaved) {
    if (shape.chunks < 2) return "interleaved needs --stages_per_rank 2 or more (1 is plain 1f1b)";
    if (shape.microbatches % shape.ranks != 0) {
      return fmt::format(
          "interleaved runs micro-batches in rounds of the {} pipeline ranks; {} micro-batches "
          "is not a multiple of {}",
          shape.ranks, shape.microbatches, shape.ranks);
    }
  }
  return "";
}

std::vector<PipelineAction> schedule_actions(PipelineSchedule schedule, const PipelineShape& shape,
                                             int rank) {
  const int p = shape.ranks, m = shape.microbatches, v = shape.chunks;
  std::vector<PipelineAction> actions;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i) actions.push_back({true, i, 0});
    for (int i = 0; i < m; ++i) actions.push_back({false, i, 0});
    return actions;
  }
  // 1F1B and interleaved 1F1B (Megatron-LM's order): the k-th forward of a rank is micro-batch
  // (k / (P*V)) * P + k % P of chunk (k / P) % V; backwards run the chunks in reverse.
  const int total = m * v;
  auto forward_at = [&](int k) {
    return PipelineAction{true, (k / (p * v)) * p + k % p, v == 1 ? 0 : (k / p) % v};
  };
  auto backward_at = [&](int k) {
    PipelineAction a = forward_at(k);
    a.forward = false;
    a.chunk = v - 1 - a.chunk;
    return a;
  };
  if (v == 1) {
    auto f = [](int k) { return PipelineAction{true, k, 0}; };
    auto b = [](int k) { return PipelineAction{false, k, 0}; };
    const int warmup = std::min(p - 1 - rank, m);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) actions.push_back(f(next_f));
    while (next_f < m) {
      actions.push_back(f(next_f++));
      actions.push_back(b(next_b++));
    }
    while (next_b < m) actions.push_back(b(next_b++));
    return actions;
  }
  const int warmup = std::min((p - 1 - rank) * 2 + (v - 1) * p, total);
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) actions.push_back(forward_at(next_f));
  while (next_f < total) {
    actions.push_back(forward_at(next_f++));
    actions.push_back(backward_at(next_b++));
  }
  while (next_b < total) actions.push_back(backward_at(next_b++));
  return actions;
}

std::vector<PipelineTransfer> schedule_transfers(PipelineSchedule schedule,
                                                 const PipelineShape& shape, int rank) {
  const int p = shape.ranks, last = shape.stages() - 1;
  std::vector<PipelineTransfer> transfers;
  for (const PipelineAction& a : schedule_actions(schedule, shape, rank)) {
    const int stage = a.chunk * p + rank, m = a.microbatch;
    const int before = (stage + p - 1) % p, after = (stage + 1) % p;  // neighbours' ranks
    if (a.forward) {
      if (stage > 0) transfers.push_back({false, true, before, m, stage - 1});
      if (stage < last) transfers.push_back({true, true, after, m, stage});
    } else {
      if (stage < last) transfers.push_back({false, false, after, m, stage + 1});
      if (stage > 0) transfers.push_back({true, false, before, m, stage});
    }
  }
  return transfers;
}

ScheduleRun simulate_schedule(PipelineSchedule schedule, const PipelineShape& shape,
                              double forward_time, double backward_time,
                              const std::vector<std::vector<double>>& chunk_bytes) {
  const int p = shape.ranks, stages = shape.stages();
  std::vector<std::vector<PipelineAction>> lists;
  for (int r = 0; r < p; ++r) lists.push_back(schedule_actions(schedule, shape, r));
  // When each (forward?, micro-batch, stage) finished.
  std::map<std::tuple<bool, int, int>, double> done;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0), busy(p, 0);
  std::vector<int> held(p, 0);
  ScheduleRun run;
  run.max_activations.assign(p, 0);
  std::vector<double> bytes(p, 0);
  if (!chunk_bytes.empty()) run.max_bytes.assign(p, 0);
  for (;;) {
    bool progressed = false, finished = true;
    for (int r = 0; r < p; ++r) {
      if (next[r] >= lists[r].size()) continue;
      finished = false;
      const PipelineAction a = lists[r][next[r]];
      const int stage = a.chunk * p + r;
      double ready = free_at[r];
      bool ok = true;
      auto need = [&](bool forward, int s) {
        auto it = done.find({forward, a.microbatch, s});
        if (it == done.end()) {
          ok = false;
        } else {
          ready = std::max(ready, it->second);
        }
      };
      if (a.forward) {
        if (stage > 0) need(true, stage - 1);
      } else {
        need(true, stage);
        if (stage < stages - 1) need(false, stage + 1);
      }
      if (!ok) continue;
      const double cost = a.forward ? forward_time : backward_time;
      free_at[r] = ready + cost;
      busy[r] += cost;
      done[{a.forward, a.microbatch, stage}] = free_at[r];
      held[r] += a.forward ? 1 : -1;
      run.max_activations[r] = std::max(run.max_activations[r], held[r]);
      if (!chunk_bytes.empty()) {
        bytes[r] += (a.forward ? 1 : -1) * chunk_bytes.at(r).at(a.chunk);
        run.max_bytes[r] = std::max(run.max_bytes[r], bytes[r]);
      }
      ++next[r];
      progressed = true;
    }
    if (finished) break;
    if (!progressed) {
      run.deadlocked = true;
      return run;
    }
  }
  run.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (int r = 0; r < p; ++r) run.idle_share.push_back(1.0 - busy[r] / run.makespan);
  return run;
}

double ideal_bubble(PipelineSchedule schedule, const PipelineShape& shape) {
  const double p = shape.ranks, m = shape.microbatches;
  const double v = schedule == PipelineSchedule::kInterleaved ? shape.chunks : 1;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace ddpx::parallel
