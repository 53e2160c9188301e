#include "dist/process_group_shm.h"

#ifdef DDPX_HAVE_SHM_GROUP

namespace ddpx::dist {

class ProcessGroupShm::ShmWork : public c10d::Work {
 public:
  ShmWork(int rank, at::Tensor tensor, bool average)
      : c10d::Work(rank, c10d::OpType::ALLREDUCE), tensor_(std::move(tensor)), average_(average) {}
  void complete(std::exception_ptr error) { finish(std::move(error)); }
  at::Tensor& tensor() { return tensor_; }
  bool average() const { return average_; }
  std::vector<at::Tensor> result() override { return {tensor_}; }

 private:
  at::Tensor tensor_;
  bool average_;
};

ProcessGroupShm::ProcessGroupShm(std::shared_ptr<c10d::ProcessGroup> fallback,
                                 std::unique_ptr<ShmAllreduce> shm)
    : c10d::ProcessGroup(fallback->getRank(), fallback->getSize()),
      fallback_(std::move(fallback)),
      shm_(std::move(shm)),
      thread_([this] { run(); }) {}

ProcessGroupShm::~ProcessGroupShm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProcessGroupShm::run() {
  while (true) {
    c10::intrusive_ptr<ShmWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = queue_.front();
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      shm_->allreduce(work->tensor(), work->average());
    } catch (...) {
      error = std::current_exception();
    }
    work->complete(error);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  if (tensors.size() != 1 || (opts.reduceOp != c10d::ReduceOp::SUM && !average) ||
      !ShmAllreduce::supports(tensors[0]))
    return fallback_->allreduce(tensors, opts);
  auto work = c10::make_intrusive<ShmWork>(getRank(), tensors[0], average);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(work);
  }
  cv_.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::broadcast(std::vector<at::Tensor>& t,
                                                          const c10d::BroadcastOptions& o) {
  return fallback_->broadcast(t, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::allreduce_coalesced(
    std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) {
  return fallback_->allreduce_coalesced(t, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::reduce(std::vector<at::Tensor>& t,
                                                       const c10d::ReduceOptions& o) {
  return fallback_->reduce(t, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::allgather(
    std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
    const c10d::AllgatherOptions& o) {
  return fallback_->allgather(out, in, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                                const c10d::AllgatherOptions& o) {
  return fallback_->_allgather_base(out, in, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::gather(std::vector<std::vector<at::Tensor>>& out,
                                                       std::vector<at::Tensor>& in,
                                                       const c10d::GatherOptions& o) {
  return fallback_->gather(out, in, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::scatter(std::vector<at::Tensor>& out,
                                                        std::vector<std::vector<at::Tensor>>& in,
                                                        const c10d::ScatterOptions& o) {
  return fallback_->scatter(out, in, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::reduce_scatter(
    std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
    const c10d::ReduceScatterOptions& o) {
  return fallback_->reduce_scatter(out, in, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                              std::vector<int64_t>& out_splits,
                                                              std::vector<int64_t>& in_splits,
                                                              const c10d::AllToAllOptions& o) {
  return fallback_->alltoall_base(out, in, out_splits, in_splits, o);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::send(std::vector<at::Tensor>& t, int dst,
                                                     int tag) {
  return fallback_->send(t, dst, tag);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::recv(std::vector<at::Tensor>& t, int src,
                                                     int tag) {
  return fallback_->recv(t, src, tag);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::recvAnysource(std::vector<at::Tensor>& t,
                                                              int tag) {
  return fallback_->recvAnysource(t, tag);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupShm::barrier(const c10d::BarrierOptions& o) {
  return fallback_->barrier(o);
}

}  // namespace ddpx::dist

#endif  // DDPX_HAVE_SHM_GROUP
