// --pipeline_schedule: the order in which a pipeline rank runs the forwards and backwards of its
// micro-batches (torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B and
// ScheduleInterleaved1F1B; Narayanan et al. 2021 for the last two).
//   gpipe        every forward, then every backward: M micro-batches of activations held
//   1f1b         after a warm-up of P-1-rank forwards, one forward then one backward: at most
//                P-rank micro-batches held, the same bubble as GPipe, (P-1)/(M+P-1)
//   interleaved  1F1B over V stages a rank (--stages_per_rank, the model cut into V*P stages,
//                rank r holding stages r, r+P, ...): the bubble shrinks to (P-1)/(V*M+P-1);
//                M must be a multiple of P
// The schedule is data: each rank's list of actions, and a simulation that runs the lists with
// timed stages, so the bubble and the activations held are checked without processes.
#pragma once

#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::parallel {

enum class PipelineSchedule { kGpipe, k1F1B, kInterleaved };
inline constexpr NameTable<PipelineSchedule, 3> kPipelineScheduleNames{
    {{PipelineSchedule::kGpipe, "gpipe"},
     {PipelineSchedule::k1F1B, "1f1b"},
     {PipelineSchedule::kInterleaved, "interleaved"}}};
inline const char* name(PipelineSchedule s) { return name_of(kPipelineScheduleNames, s); }

struct PipelineAction {
  bool forward = true;  // else backward
  int microbatch = 0;
  int chunk = 0;  // which of this rank's stages: stage chunk * ranks + rank
  bool operator==(const PipelineAction& o) const {
    return forward == o.forward && microbatch == o.microbatch && chunk == o.chunk;
  }
};

struct PipelineShape {
  int ranks = 1;         // P: pipeline ranks
  int microbatches = 1;  // M
  int chunks = 1;        // V: stages a rank (interleaved only; 1 otherwise)
  int stages() const { return ranks * chunks; }
};

// Why `shape` cannot run `schedule` ("" when it can): 1F1B with fewer micro-batches than stages
// (PyTorch's Schedule1F1B refuses it too), chunks with a schedule that has none, M not a multiple
// of P for interleaved. A batch's last, smaller part may still run fewer micro-batches.
std::string schedule_problem(PipelineSchedule schedule, const PipelineShape& shape);

// Rank `rank`'s actions, in order: each micro-batch's forward and backward once per chunk.
std::vector<PipelineAction> schedule_actions(PipelineSchedule schedule, const PipelineShape& shape,
                                             int rank);

// A transfer a rank posts as it runs its actions: an action's input received before it runs
// (activations from the previous stage for a forward, gradients from the next for a backward),
// its output sent after.
struct PipelineTransfer {
  bool send = true;     // else a receive
  bool forward = true;  // activations, else their gradients
  int peer = 0;         // the pipeline rank at the other end
  int microbatch = 0;
  int stage = 0;  // the sending stage
  bool operator==(const PipelineTransfer& o) const {
    return send == o.send && forward == o.forward && peer == o.peer && microbatch == o.microbatch &&
           stage == o.stage;
  }
};

// Rank `rank`'s transfers in the order it posts them. NCCL matches a pair's transfers by this
// order alone: on each link (pipeline_links.h) one end's sends must come in the order of the
// other end's receives, which every schedule here keeps (tested for P, M and V up to 8, 16, 4).
std::vector<PipelineTransfer> schedule_transfers(PipelineSchedule schedule,
                                                 const PipelineShape& shape, int rank);

// The schedule run with every stage's forward taking `forward_time` and backward
// `backward_time`, each rank starting an action once its input is there (the previous stage's
// forward, the next stage's backward) and sends taking no time.
// With `chunk_bytes` (per rank, per chunk: what one micro-batch's forward of that stage leaves
// held), max_bytes is each rank's most bytes held at once: an interleaved rank's stages differ.
struct ScheduleRun {
  double makespan = 0;
  std::vector<double> idle_share;    // per rank: the share of the makespan it waited
  std::vector<int> max_activations;  // per rank: the most micro-batch activations it held
  std::vector<double> max_bytes;     // per rank, with chunk_bytes
  bool deadlocked = false;           // no rank could go on
};
ScheduleRun simulate_schedule(PipelineSchedule schedule, const PipelineShape& shape,
                              double forward_time = 1.0, double backward_time = 2.0,
                              const std::vector<std::vector<double>>& chunk_bytes = {});

// The bubble a schedule ideally has: (P-1)/(M+P-1), interleaved (P-1)/(V*M+P-1).
double ideal_bubble(PipelineSchedule schedule, const PipelineShape& shape);

}  // namespace ddpx::parallel
