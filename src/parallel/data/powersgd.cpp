// PowerSGD gradient compression (see powersgd.h).
#include "parallel/data/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "distributed/collectives.h"

namespace ddpx::parallel {
namespace {

// A gradient as PowerSGD sees it: its first dimension by the rest (a scalar or 1-D tensor has
// m = 1, which never compresses).
struct MatrixShape {
  int64_t n = 1, m = 1;
};

MatrixShape matrix_shape(const torch::Tensor& param) {
  MatrixShape s;
  s.n = param.dim() >= 1 ? param.size(0) : 1;
  s.m = s.n > 0 ? param.numel() / s.n : 0;
  return s;
}

int64_t effective_rank(const MatrixShape& s, int64_t rank) { return std::min({s.n, s.m, rank}); }

bool compresses(const MatrixShape& s, int64_t rank, double rate) {
  const int64_t r = effective_rank(s, rank);
  return static_cast<double>((s.n + s.m) * r) * rate < static_cast<double>(s.n * s.m);
}

// Orthonormal columns for each matrix of a (B, n, r) batch, in place: Gram-Schmidt for rank up
// to 2 (as PyTorch's hook), QR above.
void orthogonalize(const torch::Tensor& matrices, double epsilon) {
  const int64_t cols = matrices.size(2);
  if (cols > 2 && epsilon == 0) {
    matrices.copy_(std::get<0>(at::linalg_qr(matrices)));
    return;
  }
  for (int64_t i = 0; i < cols; ++i) {
    auto col = matrices.narrow(2, i, 1);
    auto norm = col.norm(2, {1}, /*keepdim=*/true);
    col.div_(epsilon == 0 ? norm : norm.add(epsilon));
    if (i + 1 < cols) {
      auto rest = matrices.narrow(2, i + 1, cols - i - 1);
      rest.sub_((col * rest).sum({1}, /*keepdim=*/true) * col);
    }
  }
}

c10::intrusive_ptr<c10d::Work> sum(c10d::ProcessGroup& group, const torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  return group.allreduce(tensors, options);
}

}  // namespace

PowerSgdTraffic powersgd_traffic(const std::vector<torch::Tensor>& params,
                                 const PowerSgdOptions& options) {
  PowerSgdTraffic t;
  for (const auto& p : params) {
    const auto s = matrix_shape(p);
    t.numel_before += p.numel();
    t.numel_after += compresses(s, options.rank, options.min_compression_rate)
                         ? (s.n + s.m) * effective_rank(s, options.rank)
                         : p.numel();
    if (options.error_feedback) t.error_feedback_bytes += p.numel() * p.element_size();
  }
  return t;
}

void check_powersgd(const std::vector<torch::Tensor>& params, const PowerSgdOptions& options,
                    const std::string& what) {
  DDPX_CHECK(options.rank >= 1, ErrorKind::kUsage,
             "--powersgd_rank {}: expected a matrix approximation rank of at least 1",
             options.rank);
  DDPX_CHECK(options.start_iter >= 0, ErrorKind::kUsage,
             "--powersgd_start_iter {}: expected a step count of at least 0", options.start_iter);
  int64_t largest = 0;  // the largest rank at which some matrix still compresses
  for (const auto& p : params) {
    const auto s = matrix_shape(p);
    for (int64_t r = std::min(s.n, s.m); r > largest; --r) {
      if (compresses(s, r, options.min_compression_rate)) {
        largest = r;
        break;
      }
    }
  }
  DDPX_CHECK(largest > 0, ErrorKind::kUsage,
             "--comm_hook powersgd: no gradient of {} is a matrix that compresses (each is "
             "1-D or too small); use --comm_hook allreduce",
             what);
  DDPX_CHECK(options.rank <= largest, ErrorKind::kUsage,
             "--powersgd_rank {}: no gradient matrix of {} compresses at that rank (its rank-{} "
             "factors would be at least half its size); use --powersgd_rank {} or less",
             options.rank, what, options.rank, largest);
}

std::string describe_powersgd(const PowerSgdOptions& options, const PowerSgdTraffic& traffic) {
  auto count = [](int64_t n) {
    return n >= 1000000 ? fmt::format("{:.1f}M", n / 1e6)
           : n >= 1000  ? fmt::format("{:.1f}K", n / 1e3)
                        : std::to_string(n);
  };
  return fmt::format(
      "PowerSGD rank {} from step {}: {:.1f}x less gradient traffic ({} -> {} elements a step), "
      "error feedback {:.1f} MB",
      options.rank, options.start_iter, traffic.ratio(), count(traffic.numel_before),
      count(traffic.numel_after), traffic.error_feedback_bytes / 1e6);
}

// The rest of a compressed bucket's reduction, run when DDP waits for the bucket: P's sum
// orthogonalized, Q = M^T P all-reduced, M = P Q^T / N, and the error kept.
class PowerSgdWork : public c10d::Work {
 public:
  struct Group {                           // matrices of one shape, batched (B, n, m)
    std::vector<torch::Tensor> originals;  // views into the bucket's buffer
    torch::Tensor batch;                   // the stack of them, or the one view unsqueezed
    torch::Tensor p, q;                    // (B, n, r) and (B, m, r), views into the state
  };

  PowerSgdWork(std::shared_ptr<PowerSgd> owner, size_t bucket, torch::Tensor buffer,
               torch::Tensor input_copy, std::vector<Group> groups,
               std::vector<torch::Tensor> uncompressed, torch::Tensor flat,
               c10::intrusive_ptr<c10d::Work> flat_work, c10::intrusive_ptr<c10d::Work> p_work)
      : owner_(std::move(owner)),
        bucket_(bucket),
        buffer_(std::move(buffer)),
        input_copy_(std::move(input_copy)),
        groups_(std::move(groups)),
        uncompressed_(std::move(uncompressed)),
        flat_(std::move(flat)),
        flat_work_(std::move(flat_work)),
        p_work_(std::move(p_work)) {}

  bool wait(std::chrono::milliseconds timeout) override {
    if (done_) return true;
    done_ = true;
    try {
      finish_reduction();
    } catch (...) {
      finish(std::current_exception());
      throw;
    }
    finish();
    return true;
  }

 private:
  void finish_reduction() {
    torch::NoGradGuard no_grad;
    auto& state = owner_->state_[bucket_];
    const double world = owner_->group_->getSize();
    if (flat_work_) {
      dist::wait_work(flat_work_, "PowerSGD all-reduce of the uncompressed gradients");
      flat_.div_(world);
      int64_t offset = 0;
      for (auto& t : uncompressed_) {
        t.copy_(flat_.narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
    if (p_work_) {
      dist::wait_work(p_work_, "PowerSGD all-reduce of P");
      // P's sum needs no division: it is orthogonalized.
      for (auto& g : groups_) orthogonalize(g.p, owner_->options_.orthogonalization_epsilon);
      for (auto& g : groups_) at::bmm_out(g.q, g.batch.transpose(1, 2), g.p);
      dist::wait_work(sum(*owner_->group_, state.q), "PowerSGD all-reduce of Q");
      state.q.div_(world);
      for (auto& g : groups_) {
        at::bmm_out(g.batch, g.p, g.q.transpose(1, 2));
        if (g.originals.size() > 1)
          for (size_t i = 0; i < g.originals.size(); ++i) g.originals[i].copy_(g.batch[i]);
      }
    }
    // What the approximation missed of this rank's gradient, for the next step.
    if (input_copy_.defined()) at::sub_out(state.error, input_copy_, buffer_);
    if (!owner_->options_.warm_start) {
      state.p = torch::Tensor();
      state.q = torch::Tensor();
    }
  }

  std::shared_ptr<PowerSgd> owner_;
  size_t bucket_;
  torch::Tensor buffer_, input_copy_;
  std::vector<Group> groups_;
  std::vector<torch::Tensor> uncompressed_;
  torch::Tensor flat_;
  c10::intrusive_ptr<c10d::Work> flat_work_, p_work_;
  bool done_ = false;
};

PowerSgd::PowerSgd(std::shared_ptr<c10d::ProcessGroup> group, PowerSgdOptions options)
    : group_(std::move(group)), options_(options) {
  DDPX_CHECK(options_.rank >= 1 && options_.start_iter >= 0, ErrorKind::kUsage,
             "PowerSGD rank {} from step {}: expected a rank of at least 1 and a step of at "
             "least 0 (--powersgd_rank, --powersgd_start_iter)",
             options_.rank, options_.start_iter);
  DDPX_CHECK(options_.min_compression_rate > 0, ErrorKind::kUsage,
             "PowerSGD min_compression_rate {}: expected more than 0",
             options_.min_compression_rate);
  DDPX_CHECK(group_ != nullptr, ErrorKind::kInternal, "PowerSGD needs a process group");
}

torch::Tensor PowerSgd::error_feedback(size_t index) const {
  auto it = state_.find(index);
  return it == state_.end() ? torch::Tensor() : it->second.error;
}

CommHookFn PowerSgd::hook() {
  auto self = shared_from_this();
  return [self](const GradBucket& bucket) { return self->reduce(bucket); };
}

c10::intrusive_ptr<c10d::Work> PowerSgd::reduce(const GradBucket& bucket) {
  torch::NoGradGuard no_grad;
  const bool compressing = iteration_ >= options_.start_iter;
  if (bucket.last) ++iteration_;
  const auto& buffer = bucket.buffer;
  const bool floating = buffer.is_floating_point();
  if (!compressing || !floating) {  // the plain average
    buffer.div_(group_->getSize());
    return sum(*group_, buffer);
  }
  auto& state = state_[bucket.index];
  if (state.numel != buffer.numel()) {  // a new layout (DDP rebuilds its buckets once)
    state = BucketState();
    state.numel = buffer.numel();
  }
  torch::Tensor input_copy;
  if (options_.error_feedback) {
    if (state.error.defined())
      buffer.add_(state.error);
    else
      state.error = torch::zeros_like(buffer);
    input_copy = buffer.clone();
  }

  // Which gradients compress, batched by shape in the order first seen.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<torch::Tensor>>> by_shape;
  std::vector<torch::Tensor> uncompressed;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const auto s = matrix_shape(bucket.params[k]);
    auto view = buffer.narrow(0, bucket.offsets[k], bucket.params[k].numel());
    if (!compresses(s, options_.rank, options_.min_compression_rate)) {
      uncompressed.push_back(view);
      continue;
    }
    auto key = std::make_pair(s.n, s.m);
    auto it = std::find_if(by_shape.begin(), by_shape.end(),
                           [&](const auto& entry) { return entry.first == key; });
    if (it == by_shape.end()) it = by_shape.insert(by_shape.end(), {key, {}});
    it->second.push_back(view.view({s.n, s.m}));
  }
  int64_t p_numel = 0, q_numel = 0;
  for (const auto& [shape, tensors] : by_shape) {
    const int64_t r = effective_rank({shape.first, shape.second}, options_.rank);
    p_numel += static_cast<int64_t>(tensors.size()) * shape.first * r;
    q_numel += static_cast<int64_t>(tensors.size()) * shape.second * r;
  }
  const bool fresh_q = !state.q.defined();
  if (fresh_q) {
    state.p = torch::empty({p_numel}, buffer.options());
    state.q = torch::empty({q_numel}, buffer.options());
  }
  std::vector<PowerSgdWork::Group> groups;
  int64_t p_at = 0, q_at = 0;
  for (auto& [shape, tensors] : by_shape) {
    const auto [n, m] = shape;
    const int64_t b = static_cast<int64_t>(tensors.size());
    const int64_t r = effective_rank({n, m}, options_.rank);
    PowerSgdWork::Group g;
    g.batch = b == 1 ? tensors[0].unsqueeze(0) : torch::stack(tensors);
    g.originals = std::move(tensors);
    g.p = state.p.narrow(0, p_at, b * n * r).view({b, n, r});
    g.q = state.q.narrow(0, q_at, b * m * r).view({b, m, r});
    p_at += b * n * r;
    q_at += b * m * r;
    if (fresh_q) {
      // The same draws on every rank: a CPU generator seeded by the options and the count.
      auto generator = at::detail::createCPUGenerator(options_.seed + draws_++);
      g.q.copy_(at::randn(g.q.sizes(), generator, torch::TensorOptions(buffer.scalar_type())));
    }
    orthogonalize(g.q, options_.orthogonalization_epsilon);
    at::bmm_out(g.p, g.batch, g.q);
    groups.push_back(std::move(g));
  }

  torch::Tensor flat;
  c10::intrusive_ptr<c10d::Work> flat_work, p_work;
  if (!uncompressed.empty()) {
    std::vector<torch::Tensor> pieces;
    for (const auto& t : uncompressed) pieces.push_back(t.view({-1}));
    flat = torch::cat(pieces);
    flat_work = sum(*group_, flat);
  }
  if (!groups.empty()) p_work = sum(*group_, state.p);
  return c10::make_intrusive<PowerSgdWork>(
      shared_from_this(), bucket.index, buffer, std::move(input_copy), std::move(groups),
      std::move(uncompressed), std::move(flat), std::move(flat_work), std::move(p_work));
}

}  // namespace ddpx::parallel
