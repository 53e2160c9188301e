// The pipeline plan's tied parameters (see pipeline_plan.h): a parameter that the stages of two
// pipeline ranks use (GPT's token embedding on the first stage is its output layer on the last)
// is held whole on both, and after a synchronized backward their gradients are summed over a
// group of those ranks (Megatron-LM's embedding group), so both copies take the same step.
#include <fmt/format.h>

#include <map>
#include <set>

#include "core/error.h"
#include "distributed/context.h"
#include "distributed/sub_group.h"
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::parallel {

std::vector<torch::Tensor> PipelinePlan::params_of(int pipeline_rank) const {
  std::vector<torch::Tensor> params;
  std::set<const c10::TensorImpl*> seen;  // a tied parameter in two of the rank's stages: once
  for (int c = 0; c < options_.stages_per_rank; ++c) {
    const int stage = c * options_.stages + pipeline_rank;
    for (size_t l = bounds_[stage]; l < bounds_[stage + 1]; ++l) {
      for (const auto& t : layers_[l].parameters)
        if (seen.insert(t.unsafeGetTensorImpl()).second) params.push_back(t);
    }
  }
  return params;
}

void PipelinePlan::find_tied() {
  std::map<const c10::TensorImpl*, std::set<int>> holders;  // parameter -> pipeline ranks
  for (const StageInfo& s : table_) {
    for (size_t l = s.first_layer; l < s.end_layer; ++l)
      for (const auto& t : layers_[l].parameters)
        holders[t.unsafeGetTensorImpl()].insert(s.pipeline_rank);
  }
  std::set<int> ranks;
  for (const auto& [impl, on] : holders) {
    if (on.size() < 2) continue;
    DDPX_CHECK(ranks.empty() || ranks == on, ErrorKind::kUsage,
               "{} ties parameters between different sets of pipeline stages; a pipeline sums "
               "tied gradients over one group of ranks",
               options_.model_name);
    ranks = on;
  }
  tied_ranks_.assign(ranks.begin(), ranks.end());
  counted_.assign(params_.size(), true);
  if (!ranks.count(pipeline_rank_)) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (holders[params_[i].unsafeGetTensorImpl()].size() < 2) continue;
    tied_.push_back(params_[i]);
    counted_[i] = false;  // each copy's squares count 1 / copies of the norm
  }
}

int PipelinePlan::copies(const torch::Tensor& param) const {
  for (const auto& t : tied_)
    if (t.is_same(param)) return static_cast<int>(tied_ranks_.size());
  return 1;
}

void PipelinePlan::build_tied_group() {
  if (tied_ranks_.empty() || !group_) return;
  // One group a replica of the ranks that hold the tied parameters; every other rank alone.
  std::vector<std::vector<int>> groups;
  for (const auto& pipeline : mesh_.groups({MeshDim::kPipeline})) {
    std::vector<int> tied;
    for (int r = 0; r < options_.stages; ++r) {
      const int rank = mesh_.rank_with(pipeline.front(), MeshDim::kPipeline, r);
      if (std::binary_search(tied_ranks_.begin(), tied_ranks_.end(), r)) {
        tied.push_back(rank);
      } else {
        groups.push_back({rank});
      }
    }
    groups.push_back(tied);
  }
  // Recorded, as the links are: its sum is a step's collective like theirs.
  dist::SplitOptions split;
  split.recorded = true;
  tied_group_ = dist::split_group(context_, groups, "pipeline_tied", split);
}

void PipelinePlan::sum_tied_gradients() {
  if (tied_.empty() || !tied_group_ || tied_group_->world_size() < 2) return;
  torch::NoGradGuard no_grad;
  for (auto& t : tied_) {  // in params_' order: the same on every rank of the group
    if (!t.grad().defined()) t.mutable_grad() = torch::zeros_like(t);
    torch::Tensor grad = t.mutable_grad();
    tied_group_->all_reduce_sum(grad);
  }
}

}  // namespace ddpx::parallel
