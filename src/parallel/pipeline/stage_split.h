// How a pipeline cuts a model's layers (models/layer_sequence.h) into stages: contiguous runs of
// layers whose costs are as even as they can be (the largest stage as small as it can be: the
// pipeline runs at the pace of its slowest stage). The cost of a layer is its measured forward
// and backward time on one micro-batch (--pipeline_balance time, what torchtitan and DeepSpeed's
// "uniform"/"parameters" splitters approximate) or its parameter count (params).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::parallel {

enum class PipelineBalance { kTime, kParams };
inline constexpr NameTable<PipelineBalance, 2> kPipelineBalanceNames{
    {{PipelineBalance::kTime, "time"}, {PipelineBalance::kParams, "params"}}};
inline const char* name(PipelineBalance b) { return name_of(kPipelineBalanceNames, b); }

// The first layer of each of `stages` contiguous, non-empty stages, then costs.size(): stage s is
// layers [bounds[s], bounds[s+1]). Minimises the largest stage's cost. Throws ddpx::Error(kUsage)
// when there are fewer layers than stages.
std::vector<size_t> balance_stages(const std::vector<double>& costs, int stages,
                                   const std::string& model_name);

}  // namespace ddpx::parallel
