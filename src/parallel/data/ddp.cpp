// DistributedDataParallel: model agreement checks, the initial broadcast from rank 0, buffer
// broadcasts before forward, and the reducer that averages gradients during backward.
#include "parallel/data/ddp.h"

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "parallel/data/powersgd.h"
#include "parallel/data/reducer.h"

namespace ddpx::parallel {
namespace {

// Per parameter: dtype, ndim and the first kDims sizes (a longer shape folds its tail into the
// last slot). Fixed width, so the signatures of all ranks fit one all-gather.
constexpr int64_t kDims = 6;
constexpr int64_t kWidth = 2 + kDims;

std::vector<int64_t> signature(const torch::Tensor& p) {
  std::vector<int64_t> sig(kWidth, 0);
  sig[0] = static_cast<int64_t>(p.scalar_type());
  sig[1] = p.dim();
  for (int64_t d = 0; d < p.dim(); ++d) {
    const int64_t slot = std::min(d, kDims - 1);
    sig[2 + slot] = d < kDims ? p.size(d) : sig[2 + slot] * p.size(d);
  }
  return sig;
}

std::string describe(const int64_t* sig) {
  std::string shape = "[";
  for (int64_t d = 0; d < std::min(sig[1], kDims); ++d) {
    shape += (d ? ", " : "") + std::to_string(sig[2 + d]);
  }
  return shape + "] " + std::string(c10::toString(static_cast<c10::ScalarType>(sig[0])));
}

// Every rank must hold the same parameters; otherwise the all-reduces would mix unrelated
// tensors (or hang). Fails on every rank with the first mismatch.
void check_same_model(c10d::ProcessGroup& group,
                      const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  const int world = group.getSize();
  const auto count = static_cast<int64_t>(named.size());
  auto counts = dist::all_gather(group, torch::tensor({count}, torch::kLong));
  for (int r = 1; r < world; ++r) {
    DDPX_CHECK(counts[r].item<int64_t>() == counts[0].item<int64_t>(), ErrorKind::kDist,
               "rank {} has {} parameters but rank 0 has {}; every rank must build the same "
               "model",
               r, counts[r].item<int64_t>(), counts[0].item<int64_t>());
  }
  if (named.empty()) return;
  std::vector<int64_t> mine;
  for (const auto& [name, p] : named) {
    auto sig = signature(p);
    mine.insert(mine.end(), sig.begin(), sig.end());
  }
  auto all = dist::all_gather(group, torch::tensor(mine, torch::kLong));
  const int64_t* ref = all[0].data_ptr<int64_t>();
  for (size_t i = 0; i < named.size(); ++i) {
    for (int r = 1; r < world; ++r) {
      const int64_t* other = all[r].data_ptr<int64_t>();
      bool same = std::equal(ref + i * kWidth, ref + (i + 1) * kWidth, other + i * kWidth);
      DDPX_CHECK(same, ErrorKind::kDist,
                 "parameter '{}' (#{}) is {} on rank {} but {} on rank 0; every rank must build "
                 "the same model with the same options",
                 named[i].first, i, describe(other + i * kWidth), r, describe(ref + i * kWidth));
    }
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(torch::nn::AnyModule module,
                                                 std::shared_ptr<c10d::ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  DDPX_CHECK(options_.first_bucket_bytes > 0 && options_.bucket_bytes > 0, ErrorKind::kUsage,
             "bucket caps must be positive (first {} bytes, then {} bytes)",
             options_.first_bucket_bytes, options_.bucket_bytes);
  // A group of one (Context's forced group) gets the reducer too: it runs every path of a
  // larger world, its all-reduces averaging one rank's gradients.
  if (!group_) return;

  const auto named = module_.ptr()->named_parameters(/*recurse=*/true);
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& item : named) all.emplace_back(item.key(), item.value());
  check_same_model(*group_, all);

  // Rank 0's weights and buffers everywhere: ranks may have been initialized differently.
  std::vector<torch::Tensor> state;
  for (const auto& [name, p] : all) state.push_back(p);
  for (const auto& b : module_.ptr()->buffers(/*recurse=*/true)) state.push_back(b);
  dist::broadcast_coalesced(*group_, state, /*root=*/0);

  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : all) {
    if (!p.requires_grad()) continue;
    params.push_back(p);
    names.push_back(name);
  }
  if (!params.empty()) {
    reducer_ = std::make_unique<Reducer>(std::move(params), std::move(names), group_, options_);
    if (options_.comm_hook == dist::CommHook::kPowerSgd)
      reducer_->set_comm_hook(std::make_shared<PowerSgd>(group_, options_.powersgd)->hook());
  }
}

namespace {
DdpOptions with_policy(DdpOptions options, const dist::Context& context) {
  if (!options.buckets.allocate && !options.buckets.averages) {
    options.buckets = context.bucket_policy();
  }
  return options;
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(torch::nn::AnyModule module,
                                                 const dist::Context& context, DdpOptions options)
    : DistributedDataParallel(std::move(module), context.process_group(),
                              with_policy(std::move(options), context)) {}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::pre_forward() {
  if (!group_) return;
  if (options_.broadcast_buffers) {
    auto buffers = module_.ptr()->buffers(/*recurse=*/true);
    if (!buffers.empty()) dist::broadcast_coalesced(*group_, buffers, /*root=*/0);
  }
  if (reducer_) reducer_->prepare_for_forward(require_sync_);
}

void DistributedDataParallel::register_comm_hook(CommHookFn hook) {
  if (reducer_) reducer_->set_comm_hook(std::move(hook));
}

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const {
  return reducer_ ? reducer_->bucket_layout() : std::vector<std::vector<size_t>>{};
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.require_sync_) {
  ddp_.require_sync_ = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.require_sync_ = previous_; }

}  // namespace ddpx::parallel
