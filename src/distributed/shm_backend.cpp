// The shared-memory CPU backend (see shm_backend.h).
#include "distributed/shm_backend.h"

namespace ddpx::dist {
namespace {

// A strategy's collective steps (PeerSteps) as the transport's calls.
class ShmSteps final : public PeerSteps {
 public:
  explicit ShmSteps(ShmAllreduce& shm) : shm_(shm) {}
  void reduce_apply(torch::Tensor& tensor, const ApplyFn& apply) override {
    shm_.allreduce_apply(tensor, apply);
  }
  void gather_apply(const torch::Tensor& tensor, const ReadFn& read) override {
    shm_.gather_apply(tensor, read);
  }
  void barrier() override { shm_.barrier(); }

 private:
  ShmAllreduce& shm_;
};

}  // namespace

void count_published_with(void (*counter)(int64_t bytes)) { ShmArena::count_with(counter); }

class ShmBackend::ShmWork : public c10d::Work {
 public:
  ShmWork(int rank, c10d::OpType type, std::function<void(ShmAllreduce&)> op,
          std::vector<at::Tensor> results = {})
      : c10d::Work(rank, type), op_(std::move(op)), results_(std::move(results)) {}
  void run(ShmAllreduce& shm) {
    std::exception_ptr error;
    try {
      op_(shm);
    } catch (...) {
      error = std::current_exception();
    }
    finish(error);
  }
  std::vector<at::Tensor> result() override { return results_; }

 private:
  std::function<void(ShmAllreduce&)> op_;
  std::vector<at::Tensor> results_;
};

ShmBackend::ShmBackend(c10::intrusive_ptr<c10d::Backend> gloo, std::unique_ptr<ShmAllreduce> shm)
    : ForwardingBackend(std::move(gloo)), shm_(std::move(shm)), thread_([this] { run(); }) {}

ShmBackend::~ShmBackend() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ShmBackend::run() {
  while (true) {
    c10::intrusive_ptr<ShmWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = queue_.front();
      queue_.pop_front();
    }
    work->run(*shm_);
  }
}

c10::intrusive_ptr<c10d::Work> ShmBackend::enqueue(c10::intrusive_ptr<ShmWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(work);
  }
  cv_.notify_one();
  return work;
}

torch::Tensor ShmBackend::allocate_bucket(int64_t numel, c10::ScalarType dtype) const {
  if (!arena() || !averages(dtype)) return {};
  return arena()->allocate(numel, dtype);
}

torch::Tensor ShmBackend::allocate(int64_t numel, c10::ScalarType dtype, bool kept) {
  if (!arena()) return {};
  return arena()->allocate(numel, dtype, kept);
}

std::optional<int64_t> ShmBackend::offset_of(const torch::Tensor& tensor) const {
  if (!arena() || !tensor.defined() || !tensor.device().is_cpu()) return std::nullopt;
  auto at = arena()->locate(tensor.data_ptr(), tensor.numel() * tensor.element_size());
  if (!at) return std::nullopt;
  return static_cast<int64_t>(*at);
}

torch::Tensor ShmBackend::peer_view(int rank, int64_t offset, int64_t numel,
                                    c10::ScalarType dtype) const {
  return shm_->peer_tensor(rank, static_cast<size_t>(offset), numel, dtype);
}

c10::intrusive_ptr<c10d::Work> ShmBackend::submit(std::function<void(PeerSteps&)> op) {
  return enqueue(c10::make_intrusive<ShmWork>(getRank(), c10d::OpType::UNKNOWN,
                                              [op = std::move(op)](ShmAllreduce& shm) {
                                                ShmSteps steps(shm);
                                                op(steps);
                                              }));
}

c10::intrusive_ptr<c10d::Work> ShmBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  if (tensors.size() != 1 || (opts.reduceOp != c10d::ReduceOp::SUM && !average) ||
      !ShmAllreduce::supports(tensors[0]))
    return inner_->allreduce(tensors, opts);
  return enqueue(c10::make_intrusive<ShmWork>(
      getRank(), c10d::OpType::ALLREDUCE,
      [tensor = tensors[0], average](ShmAllreduce& shm) mutable { shm.allreduce(tensor, average); },
      tensors));
}

c10::intrusive_ptr<c10d::Work> ShmBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  if (tensors.size() != 1 || opts.rootTensor != 0 || !ShmAllreduce::supports_broadcast(tensors[0]))
    return inner_->broadcast(tensors, opts);
  return enqueue(c10::make_intrusive<ShmWork>(
      getRank(), c10d::OpType::BROADCAST,
      [tensor = tensors[0], root = static_cast<int>(opts.rootRank)](ShmAllreduce& shm) mutable {
        shm.broadcast(tensor, root);
      },
      tensors));
}

c10::intrusive_ptr<c10d::Work> ShmBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  bool takes = outputs.size() == inputs.size() && !outputs.empty() &&
               (opts.reduceOp == c10d::ReduceOp::SUM || average);
  for (size_t i = 0; takes && i < outputs.size(); ++i)
    takes = shm_->takes_reduce_scatter(outputs[i], inputs[i]);
  if (!takes) {
    if (outputs.size() == 1 && inputs.size() == 1)
      return inner_->_reduce_scatter_base(outputs[0], inputs[0], opts);
    return inner_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
  }
  return enqueue(c10::make_intrusive<ShmWork>(
      getRank(), outputs.size() == 1 ? c10d::OpType::_REDUCE_SCATTER_BASE : c10d::OpType::COALESCED,
      [outputs, inputs, average](ShmAllreduce& shm) mutable {
        for (size_t i = 0; i < outputs.size(); ++i)
          shm.reduce_scatter(outputs[i], inputs[i], average);
      },
      outputs));
}

c10::intrusive_ptr<c10d::Work> ShmBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outputs{output}, inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ShmBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  bool takes = outputs.size() == inputs.size() && !outputs.empty();
  for (size_t i = 0; takes && i < outputs.size(); ++i)
    takes = shm_->takes_all_gather(outputs[i], inputs[i]);
  if (!takes) {
    if (outputs.size() == 1 && inputs.size() == 1)
      return inner_->_allgather_base(outputs[0], inputs[0], opts);
    return inner_->allgather_into_tensor_coalesced(outputs, inputs, opts);
  }
  return enqueue(c10::make_intrusive<ShmWork>(
      getRank(), outputs.size() == 1 ? c10d::OpType::_ALLGATHER_BASE : c10d::OpType::COALESCED,
      [outputs, inputs](ShmAllreduce& shm) mutable {
        for (size_t i = 0; i < outputs.size(); ++i) shm.all_gather(outputs[i], inputs[i]);
      },
      outputs));
}

}  // namespace ddpx::dist
