// Megatron's f and g (see regions.h).
#include "parallel/tensor/regions.h"

#include <torch/autograd.h>

#include <algorithm>
#include <vector>

#include "distributed/collectives.h"
#include "distributed/context.h"

namespace ddpx::parallel::tensor {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

dist::Context& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<dist::Context*>(ctx->saved_data["group"].toInt());
}

torch::Tensor all_reduced(const torch::Tensor& t, dist::Context& group) {
  torch::Tensor sum = t.contiguous().clone();
  group.all_reduce_sum(sum);
  return sum;
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);  // a new node in the graph over the same values
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t group) {
    return all_reduced(x, *reinterpret_cast<dist::Context*>(group));
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

int64_t address(dist::Context& group) { return reinterpret_cast<int64_t>(&group); }

// The collectives over tokens work on (S, B, D), contiguous, each rank's share padded to
// ceil(S / T) rows: c10d's all-gather and reduce-scatter into a tensor take equal pieces.
int64_t padded_share(int64_t tokens, int ranks) { return (tokens + ranks - 1) / ranks; }

// x: (B, count, D), this rank's share -> (B, tokens, D).
torch::Tensor all_gather_tokens(const torch::Tensor& x, int64_t tokens, dist::Context& group) {
  const int ranks = group.world_size();
  const int64_t rows = padded_share(tokens, ranks);
  torch::Tensor mine = x.transpose(0, 1);  // (count, B, D)
  auto padded = torch::zeros({rows, x.size(0), x.size(2)}, x.options());
  padded.narrow(0, 0, mine.size(0)).copy_(mine);
  auto gathered = torch::empty({ranks * rows, x.size(0), x.size(2)}, x.options());
  dist::wait_work(group.process_group()->_allgather_base(gathered, padded),
                  "the all-gather of a sequence-parallel activation");
  std::vector<torch::Tensor> shares;
  for (int r = 0; r < ranks; ++r) {
    shares.push_back(gathered.narrow(0, r * rows, token_shard(tokens, r, ranks).count));
  }
  return torch::cat(shares, 0).transpose(0, 1).contiguous();
}

// x: (B, S, D), partial sums on every rank -> (B, count, D), this rank's share of their sum.
torch::Tensor reduce_scatter_to_share(const torch::Tensor& x, dist::Context& group) {
  const int ranks = group.world_size();
  const int64_t tokens = x.size(1), rows = padded_share(tokens, ranks);
  torch::Tensor seq = x.transpose(0, 1);  // (S, B, D)
  auto padded = torch::zeros({ranks * rows, x.size(0), x.size(2)}, x.options());
  for (int r = 0; r < ranks; ++r) {
    const TokenShard s = token_shard(tokens, r, ranks);
    padded.narrow(0, r * rows, s.count).copy_(seq.narrow(0, s.start, s.count));
  }
  auto mine = torch::empty({rows, x.size(0), x.size(2)}, x.options());
  c10d::ReduceScatterOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  dist::wait_work(group.process_group()->_reduce_scatter_base(mine, padded, options),
                  "the reduce-scatter of a sequence-parallel activation");
  const TokenShard s = token_shard(tokens, group.rank(), ranks);
  return mine.narrow(0, 0, s.count).transpose(0, 1).contiguous();
}

torch::Tensor my_share(const torch::Tensor& x, dist::Context& group) {
  const TokenShard s = token_shard(x.size(1), group.rank(), group.world_size());
  return x.narrow(1, s.start, s.count).contiguous();
}

struct SplitTokens : torch::autograd::Function<SplitTokens> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["tokens"] = x.size(1);
    return my_share(x, *reinterpret_cast<dist::Context*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t tokens = ctx->saved_data["tokens"].toInt();
    return {all_gather_tokens(grads[0].contiguous(), tokens, group_of(ctx)), torch::Tensor()};
  }
};

struct GatherTokens : torch::autograd::Function<GatherTokens> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tokens,
                               int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_tokens(x.contiguous(), tokens, *reinterpret_cast<dist::Context*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scatter_to_share(grads[0].contiguous(), group_of(ctx)), torch::Tensor(),
            torch::Tensor()};
  }
};

struct ReduceScatterTokens : torch::autograd::Function<ReduceScatterTokens> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["tokens"] = x.size(1);
    return reduce_scatter_to_share(x.contiguous(), *reinterpret_cast<dist::Context*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t tokens = ctx->saved_data["tokens"].toInt();
    return {all_gather_tokens(grads[0].contiguous(), tokens, group_of(ctx)), torch::Tensor()};
  }
};

struct WholeTokens : torch::autograd::Function<WholeTokens> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tokens,
                               int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_tokens(x.contiguous(), tokens, *reinterpret_cast<dist::Context*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {my_share(grads[0], group_of(ctx)), torch::Tensor(), torch::Tensor()};
  }
};

// gather_tokens then linear, the gathered input recomputed in backward (see regions.h).
struct GatherTokensLinear : torch::autograd::Function<GatherTokensLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               int64_t tokens, int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["tokens"] = tokens;
    ctx->saved_data["bias"] = bias.defined();
    ctx->save_for_backward({x, weight});
    const torch::Tensor whole =
        all_gather_tokens(x.contiguous(), tokens, *reinterpret_cast<dist::Context*>(group));
    return at::linear(whole, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];
    dist::Context& group = group_of(ctx);
    // In the gradient's dtype (bf16 under autocast, as the forward's product was).
    const torch::Tensor g = grads[0].contiguous();
    const auto dtype = g.scalar_type();
    const int64_t out = g.size(-1), in = weight.size(1);
    const torch::Tensor whole =
        all_gather_tokens(x.contiguous(), ctx->saved_data["tokens"].toInt(), group).to(dtype);
    const torch::Tensor rows = g.reshape({-1, out});
    torch::Tensor grad_weight, grad_bias;
    if (ctx->needs_input_grad(1))
      grad_weight = rows.t().mm(whole.reshape({-1, in})).to(weight.scalar_type());
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      grad_bias = rows.sum(0).to(weight.scalar_type());
    torch::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      grad_x = reduce_scatter_to_share(at::matmul(g, weight.to(dtype)), group).to(x.scalar_type());
    }
    return {grad_x, grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TokenShard token_shard(int64_t tokens, int rank, int ranks) {
  const int64_t base = tokens / ranks, extra = tokens % ranks;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

torch::Tensor split_tokens(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x;
  return SplitTokens::apply(x, address(group));
}

torch::Tensor gather_tokens(const torch::Tensor& x, int64_t tokens, dist::Context& group) {
  if (!group.distributed()) return x;
  return GatherTokens::apply(x, tokens, address(group));
}

torch::Tensor reduce_scatter_tokens(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x;
  return ReduceScatterTokens::apply(x, address(group));
}

torch::Tensor whole_tokens(const torch::Tensor& x, int64_t tokens, dist::Context& group) {
  if (!group.distributed()) return x;
  return WholeTokens::apply(x, tokens, address(group));
}

torch::Tensor gather_tokens_linear(const torch::Tensor& x, int64_t tokens,
                                   const torch::Tensor& weight, const torch::Tensor& bias,
                                   dist::Context& group) {
  if (!group.distributed()) return at::linear(x, weight, bias);
  return GatherTokensLinear::apply(x, weight, bias, tokens, address(group));
}

torch::Tensor copy_to_region(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x;
  return CopyToRegion::apply(x, address(group));
}

torch::Tensor reduce_from_region(const torch::Tensor& x, dist::Context& group) {
  if (!group.distributed()) return x;
  return ReduceFromRegion::apply(x, address(group));
}

}  // namespace ddpx::parallel::tensor
