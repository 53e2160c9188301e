// The bucketing gradient reducer (see reducer.h for the contract).
#include "parallel/data/reducer.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <map>

#include "core/error.h"
#include "distributed/collectives.h"
#include "parallel/ready_hook.h"

namespace ddpx::parallel {
namespace {

// A slice of `buffer` shaped like `param`, with its strides where it is dense (a channels_last
// parameter gets a channels_last gradient, as AccumulateGrad would make it; c10d's Reducer does
// the same). Made below the autograd dispatch keys so that it is a plain tensor, not an autograd
// view: Optimizer::zero_grad's in-place detach_() would reject an autograd view, and
// AccumulateGrad then adds into it in place.
torch::Tensor bucket_view(const torch::Tensor& buffer, int64_t offset, const torch::Tensor& param) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const auto sizes = param.sizes();
  std::vector<int64_t> strides(sizes.size(), 1);
  if (param.is_non_overlapping_and_dense()) {
    strides.assign(param.strides().begin(), param.strides().end());
  } else {
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d) {
      strides[d] = strides[d + 1] * sizes[d + 1];
    }
  }
  return buffer.as_strided(sizes, strides, buffer.storage_offset() + offset);
}

}  // namespace

std::vector<std::vector<size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                const std::vector<size_t>& order, int64_t first_cap,
                                                int64_t cap) {
  struct Open {
    std::vector<size_t> indices;
    int64_t bytes = 0;
    int64_t limit = 0;
  };
  std::map<int, Open> open;  // one open bucket per dtype: a bucket buffer has one dtype
  std::vector<std::vector<size_t>> result;
  for (size_t index : order) {
    const auto& p = params[index];
    auto [it, fresh] = open.try_emplace(static_cast<int>(p.scalar_type()));
    if (fresh) it->second.limit = first_cap;
    it->second.indices.push_back(index);
    it->second.bytes += p.numel() * p.element_size();
    if (it->second.bytes >= it->second.limit) {
      result.push_back(std::move(it->second.indices));
      it->second = Open{{}, 0, cap};
    }
  }
  for (auto& [dtype, bucket] : open) {
    if (!bucket.indices.empty()) result.push_back(std::move(bucket.indices));
  }
  // Launch order: by where each bucket's first parameter sits in the expected ready order.
  std::vector<size_t> position(params.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::stable_sort(result.begin(), result.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return result;
}

Reducer::Reducer(std::vector<torch::Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<c10d::ProcessGroup> group, DdpOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(options),
      ready_(params_.size(), false) {
  std::vector<size_t> reverse(params_.size());
  for (size_t i = 0; i < reverse.size(); ++i) reverse[i] = reverse.size() - 1 - i;
  build_buckets(reverse);

  for (size_t i = 0; i < params_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    DDPX_CHECK(accumulator != nullptr, ErrorKind::kUsage,
               "parameter '{}' is not a leaf tensor that requires grad; DistributedDataParallel "
               "needs registered leaf parameters",
               names_[i]);
    hook_keys_.push_back(
        accumulator->add_post_hook(std::make_unique<ReadyHook>([this, i] { on_grad_ready(i); })));
    accumulators_.push_back(std::move(accumulator));
  }
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  torch::NoGradGuard no_grad;
  std::vector<Bucket> buckets;
  slots_.assign(params_.size(), Slot{});
  for (auto& indices :
       assign_buckets(params_, order, options_.first_bucket_bytes, options_.bucket_bytes)) {
    Bucket bucket;
    int64_t total = 0;
    for (size_t i : indices) total += params_[i].numel();
    const auto dtype = params_[indices.front()].scalar_type();
    const auto& policy = options_.buckets;
    if (policy.allocate && params_[indices.front()].is_cpu()) {
      bucket.buffer = policy.allocate(total, dtype);
    }
    // Decided by the group, not by this rank's allocation: every rank must ask for the same op.
    bucket.average =
        policy.averages && policy.averages(dtype, params_[indices.front()].device().type());
    if (!bucket.buffer.defined())
      bucket.buffer =
          torch::zeros({total}, params_[indices.front()].options().requires_grad(false));
    int64_t offset = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
      const auto& p = params_[indices[k]];
      auto view = bucket_view(bucket.buffer, offset, p);
      // Carry over gradients that exist already (a rebuild keeps accumulated values).
      if (p.grad().defined()) view.copy_(p.grad());
      bucket.views.push_back(view);
      slots_[indices[k]] = Slot{buckets.size(), k};
      offset += p.numel();
    }
    bucket.params = std::move(indices);
    bucket.pending = bucket.params.size();
    buckets.push_back(std::move(bucket));
  }
  buckets_ = std::move(buckets);
  for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = view_of(i);
}

torch::Tensor Reducer::view_of(size_t param) const {
  const Slot& slot = slots_[param];
  return buckets_[slot.bucket].views[slot.index];
}

void Reducer::install_grad(size_t param) {
  torch::NoGradGuard no_grad;
  auto& grad = params_[param].mutable_grad();
  const auto view = view_of(param);
  if (grad.defined() && grad.data_ptr() == view.data_ptr()) return;
  if (grad.defined()) {
    view.copy_(grad);
  } else {
    view.zero_();  // zero_grad(set_to_none): the next backward starts from zero
  }
  grad = view;
}

void Reducer::prepare_for_forward(bool require_sync) {
  begin_iteration(require_sync);
  std::lock_guard<std::mutex> lock(mutex_);
  expect_hooks_ = require_sync;
  waits_at_backward_end_ = true;
}

void Reducer::begin_iteration(bool require_sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (rebuild_due_ && require_sync) rebuild_from_ready_order();
  for (size_t i = 0; i < params_.size(); ++i) install_grad(i);
  reset_iteration();
  expect_hooks_ = false;
}

void Reducer::arm_next_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  DDPX_CHECK(!expect_hooks_ && next_bucket_ == 0, ErrorKind::kInternal,
             "the gradient reducer was armed twice in one iteration");
  expect_hooks_ = true;
  waits_at_backward_end_ = false;
}

void Reducer::finish() { finalize(); }

size_t Reducer::buckets_launched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_bucket_;
}

void Reducer::rebuild_from_ready_order() {
  rebuild_due_ = false;
  rebuilt_ = true;
  // The order every rank uses is rank 0's: buckets must line up across ranks.
  std::vector<bool> seen(params_.size(), false);
  std::vector<int64_t> order;
  for (size_t i : ready_order_) {
    if (!seen[i]) order.push_back(static_cast<int64_t>(i));
    seen[i] = true;
  }
  for (size_t i = params_.size(); i-- > 0;) {
    if (!seen[i]) order.push_back(static_cast<int64_t>(i));
  }
  auto order_tensor = torch::tensor(order, torch::kLong);
  dist::broadcast_coalesced(*group_, {order_tensor}, /*root=*/0);
  std::vector<size_t> agreed(params_.size());
  for (size_t i = 0; i < agreed.size(); ++i) agreed[i] = order_tensor[i].item<int64_t>();
  build_buckets(agreed);
  ready_order_.clear();
}

void Reducer::reset_iteration() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work.reset();
    bucket.comm = torch::Tensor();
  }
  next_bucket_ = 0;
  callback_queued_ = false;
}

void Reducer::on_grad_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!expect_hooks_) return;  // no_sync(), or a backward not preceded by a DDP forward
  if (!callback_queued_ && waits_at_backward_end_) {
    callback_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
  }
  DDPX_CHECK(!ready_[param], ErrorKind::kUsage,
             "parameter '{}' got its gradient twice in one backward; DistributedDataParallel "
             "supports one backward per forward (reentrant checkpointing is not supported)",
             names_[param]);
  install_grad(param);  // the user may have replaced .grad since the forward
  if (!rebuilt_) ready_order_.push_back(param);
  mark_ready_locked(param);
}

void Reducer::mark_ready_locked(size_t param) {
  ready_[param] = true;
  Bucket& bucket = buckets_[slots_[param].bucket];
  --bucket.pending;
  // Launch strictly in bucket order so that every rank issues the same collectives in the
  // same sequence, whatever order its gradients arrived in.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    launch(buckets_[next_bucket_++]);
  }
}

void Reducer::set_comm_hook(CommHookFn hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  hook_ = std::move(hook);
}

void Reducer::launch(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  // A range in --profile traces (the name is built only while a profiler records).
  RECORD_USER_SCOPE(fmt::format("ddpx::allreduce bucket {}", &bucket - buckets_.data()));
  if (hook_) {
    GradBucket view;
    view.index = static_cast<size_t>(&bucket - buckets_.data());
    view.last = view.index + 1 == buckets_.size();
    view.buffer = bucket.buffer;
    int64_t offset = 0;
    for (size_t i : bucket.params) {
      view.params.push_back(params_[i]);
      view.offsets.push_back(offset);
      offset += params_[i].numel();
    }
    bucket.comm = bucket.buffer;
    bucket.work = hook_(view);
    return;
  }
  c10d::AllreduceOptions options;
  if (bucket.average && options_.comm_hook == dist::CommHook::kAllreduce) {
    // Averaged by the group in the pass that sums.
    std::vector<torch::Tensor> tensors{bucket.buffer};
    bucket.comm = bucket.buffer;
    options.reduceOp = c10d::ReduceOp::AVG;
    bucket.work = group_->allreduce(tensors, options);
    return;
  }
  // Pre-divide so that the sum over ranks is the average (and fp16 sums cannot overflow).
  bucket.buffer.div_(group_->getSize());
  const bool floating =
      bucket.buffer.scalar_type() == torch::kFloat || bucket.buffer.scalar_type() == torch::kDouble;
  switch (floating ? options_.comm_hook : dist::CommHook::kAllreduce) {
    case dist::CommHook::kAllreduce:
    case dist::CommHook::kPowerSgd:  // DistributedDataParallel sets it as the hook
      bucket.comm = bucket.buffer;
      break;
    case dist::CommHook::kFp16Compress:
      bucket.comm = bucket.buffer.to(torch::kHalf);
      break;
    case dist::CommHook::kBf16Compress:
      bucket.comm = bucket.buffer.to(torch::kBFloat16);
      break;
  }
  std::vector<torch::Tensor> tensors{bucket.comm};
  options.reduceOp = c10d::ReduceOp::SUM;
  bucket.work = group_->allreduce(tensors, options);
}

void Reducer::finalize() {
  std::lock_guard<std::mutex> lock(mutex_);
  torch::NoGradGuard no_grad;
  // Whatever happens below, the next forward starts a clean iteration.
  struct Reset {
    Reducer* self;
    ~Reset() {
      self->expect_hooks_ = false;
      self->callback_queued_ = false;
    }
  } reset{this};

  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (!options_.find_unused_parameters) {
      for (auto& bucket : buckets_) {
        if (bucket.work) dist::wait_work(bucket.work, "gradient all-reduce");
      }
      fail(ErrorKind::kUsage,
           "parameter '{}' received no gradient in this backward (it did not contribute to the "
           "loss); construct DistributedDataParallel with find_unused_parameters = true",
           names_[i]);
    }
    // Unused here: its gradient counts as what is in its bucket slot (zero unless a no_sync()
    // step accumulated into it), and its bucket still launches.
    install_grad(i);
    mark_ready_locked(i);
  }
  RECORD_USER_SCOPE("ddpx::allreduce_wait");
  for (auto& bucket : buckets_) {
    dist::wait_work(bucket.work, "gradient all-reduce");
    if (!bucket.comm.is_same(bucket.buffer)) bucket.buffer.copy_(bucket.comm);
    bucket.work.reset();
    bucket.comm = torch::Tensor();
  }
  if (!rebuilt_) rebuild_due_ = true;
}

std::vector<std::vector<size_t>> Reducer::bucket_layout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::vector<size_t>> layout;
  for (const auto& bucket : buckets_) layout.push_back(bucket.params);
  return layout;
}

}  // namespace ddpx::parallel
