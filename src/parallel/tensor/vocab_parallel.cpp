// The vocabulary-parallel embedding, cross-entropy, argmax and gather (see vocab_parallel.h).
#include "parallel/tensor/vocab_parallel.h"

#include <torch/autograd.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

#include "distributed/collectives.h"
#include "distributed/context.h"
#include "parallel/tensor/regions.h"

namespace ddpx::parallel::tensor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x: (N) or (K, N) -> (T, ...): every rank's x, in rank order.
torch::Tensor all_gather(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x.unsqueeze(0).clone();
  torch::Tensor flat = x.contiguous().view({-1});
  auto gathered = torch::empty({group.world_size() * flat.numel()}, flat.options());
  dist::wait_work(group.process_group()->_allgather_base(gathered, flat),
                  "the all-gather of a vocabulary-parallel loss");
  auto shape = x.sizes().vec();
  shape.insert(shape.begin(), group.world_size());
  return gathered.view(shape);
}

// (N, R) float32 logits: the logits themselves when they are float32 (no copy).
torch::Tensor as_float(const torch::Tensor& logits) {
  return logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32);
}

// Each row's largest logit among the first `real` columns (the padding's never wins) and its
// column; -inf and 0 on a rank that holds padding only.
std::tuple<torch::Tensor, torch::Tensor> real_max(const torch::Tensor& x, int64_t real) {
  if (real == 0) {
    return {torch::full({x.size(0)}, -std::numeric_limits<float>::infinity(), x.options()),
            torch::zeros({x.size(0)}, x.options().dtype(torch::kLong))};
  }
  return x.narrow(1, 0, real).max(1);
}

int64_t real_columns(int64_t start, int64_t columns, int64_t vocab) {
  return std::clamp<int64_t>(vocab - start, 0, columns);
}

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& labels, int64_t group_address, int64_t start,
                               int64_t vocab, double smoothing) {
    auto& group = *reinterpret_cast<dist::Context*>(group_address);
    const int64_t columns = logits.size(-1), real = real_columns(start, columns, vocab);
    torch::Tensor x = as_float(logits);  // (N, R)
    // Every rank shifts by the same maximum, the whole vocabulary's.
    torch::Tensor local_max = std::get<0>(real_max(x, real));
    torch::Tensor shifted = x - std::get<0>(all_gather(local_max, group).max(0)).unsqueeze(1);
    if (real < columns) {  // the padding: exp(-inf) = 0
      shifted.narrow(1, real, columns - real).fill_(-std::numeric_limits<float>::infinity());
    }
    torch::Tensor local = labels.reshape({-1}).to(torch::kLong) - start;
    torch::Tensor mine = (local >= 0) & (local < columns);
    local = local.masked_fill(~mine, 0);
    torch::Tensor target = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(~mine, 0);
    torch::Tensor smoothed = smoothing > 0 ? shifted.narrow(1, 0, real).sum(1) : torch::Tensor();
    torch::Tensor exp = shifted.exp_();  // in place: one (N, R) tensor beside the logits
    std::vector<torch::Tensor> sums{exp.sum(1), target};
    if (smoothing > 0) sums.push_back(smoothed);
    torch::Tensor summed = torch::stack(sums);
    group.all_reduce_sum(summed);
    torch::Tensor sum_exp = summed[0], log_sum = sum_exp.log();
    torch::Tensor loss = log_sum - summed[1];
    if (smoothing > 0) {
      loss =
          (1 - smoothing) * loss + smoothing * (log_sum - summed[2] / static_cast<double>(vocab));
    }
    // The positions that count, and each one's weight in the mean (torch's: 1 / their count).
    torch::Tensor counted = labels.reshape({-1}).ne(kIgnoreIndex).to(torch::kFloat32);
    torch::Tensor weight = counted / counted.sum();
    ctx->save_for_backward({exp.div_(sum_exp.unsqueeze(1)), local, mine, weight});
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["real"] = real;
    ctx->saved_data["vocab"] = vocab;
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    ctx->saved_data["shape"] = logits.sizes().vec();
    return (loss.masked_fill(counted.eq(0), 0) * weight).sum();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const double smoothing = ctx->saved_data["smoothing"].toDouble();
    const int64_t real = ctx->saved_data["real"].toInt();
    const int64_t vocab = ctx->saved_data["vocab"].toInt();
    // The softmax, this rank's columns, turned into the gradient in place (Megatron's): a second
    // backward through the same graph is refused by autograd's version check.
    torch::Tensor grad = saved[0];
    const torch::Tensor& local = saved[1];
    const torch::Tensor& mine = saved[2];
    const torch::Tensor& weight = saved[3];
    if (smoothing > 0) grad.narrow(1, 0, real).sub_(smoothing / static_cast<double>(vocab));
    grad.scatter_add_(1, local.unsqueeze(1),
                      (mine.to(grad.scalar_type()) * -(1 - smoothing)).unsqueeze(1));
    grad.mul_(weight.unsqueeze(1) * grads[0].to(torch::kFloat32));
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.view(ctx->saved_data["shape"].toIntVector()).to(dtype),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

int64_t padded_vocab(int64_t vocab, int ranks, int64_t divisible_by) {
  const int64_t multiple = std::max<int64_t>(divisible_by, 1) * ranks;
  return (vocab + multiple - 1) / multiple * multiple;
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const torch::Tensor& whole,
                                                       const ShardSpec& spec,
                                                       dist::Context& group) {
  torch::NoGradGuard no_grad;
  weight = register_parameter("weight", take_shard(whole, spec, group.rank(), group.world_size()));
}

torch::Tensor vocab_parallel_embedding(const torch::Tensor& idx, const torch::Tensor& weight,
                                       int64_t start, dist::Context& group) {
  torch::Tensor local = idx - start;
  torch::Tensor outside = (local < 0) | (local >= weight.size(0));
  torch::Tensor rows = torch::embedding(weight, local.masked_fill(outside, 0));
  return reduce_from_region(rows.masked_fill(outside.unsqueeze(-1), 0), group);
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                           int64_t start, int64_t vocab, double label_smoothing,
                                           dist::Context& group) {
  return VocabParallelCrossEntropy::apply(logits, labels, reinterpret_cast<int64_t>(&group), start,
                                          vocab, label_smoothing);
}

torch::Tensor vocab_parallel_argmax(const torch::Tensor& logits, int64_t start, int64_t vocab,
                                    dist::Context& group) {
  torch::NoGradGuard no_grad;
  const int64_t columns = logits.size(-1);
  auto [value, index] = real_max(as_float(logits.detach()), real_columns(start, columns, vocab));
  // (T, 2, N): each rank's maximum and its index in the whole vocabulary (exact in float64).
  torch::Tensor all = all_gather(
      torch::stack({value.to(torch::kFloat64), (index + start).to(torch::kFloat64)}), group);
  torch::Tensor best = all.select(1, 0).argmax(0);  // the lowest rank on ties: the first index
  torch::Tensor predicted = all.select(1, 1).gather(0, best.unsqueeze(0)).squeeze(0);
  auto shape = logits.sizes().vec();
  shape.pop_back();
  return predicted.to(torch::kLong).view(shape);
}

torch::Tensor gather_vocab(const torch::Tensor& logits, int64_t vocab, dist::Context& group) {
  const int64_t columns = logits.size(-1);
  torch::Tensor flat = logits.reshape({-1, columns});
  torch::Tensor all = all_gather(flat, group);  // (T, N, R)
  torch::Tensor whole =
      all.permute({1, 0, 2}).reshape({flat.size(0), -1}).narrow(1, 0, vocab).contiguous();
  auto shape = logits.sizes().vec();
  shape.back() = vocab;
  return whole.view(shape);
}

}  // namespace ddpx::parallel::tensor
