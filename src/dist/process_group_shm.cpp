#include "dist/process_group_shm.h"

#ifdef DDPX_HAVE_SHM_GROUP

namespace ddpx::dist {

class ProcessGroupShm::ShmWork : public c10d::Work {
 public:
  ShmWork(int rank, c10d::OpType type, std::function<void(ShmAllreduce&)> op,
          at::Tensor tensor = {})
      : c10d::Work(rank, type), op_(std::move(op)), tensor_(std::move(tensor)) {}
  void run(ShmAllreduce& shm) {
    std::exception_ptr error;
    try {
      op_(shm);
    } catch (...) {
      error = std::current_exception();
    }
    finish(error);
  }
  std::vector<at::Tensor> result() override {
    if (tensor_.defined()) return {tensor_};
    return {};
  }

 private:
  std::function<void(ShmAllreduce&)> op_;
  at::Tensor tensor_;
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
    work->run(*shm_);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::enqueue(c10::intrusive_ptr<ShmWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(work);
  }
  cv_.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::submit(std::function<void(ShmAllreduce&)> op) {
  return enqueue(c10::make_intrusive<ShmWork>(getRank(), c10d::OpType::UNKNOWN, std::move(op)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const bool average = opts.reduceOp == c10d::ReduceOp::AVG;
  if (tensors.size() != 1 || (opts.reduceOp != c10d::ReduceOp::SUM && !average) ||
      !ShmAllreduce::supports(tensors[0]))
    return fallback_->allreduce(tensors, opts);
  return enqueue(c10::make_intrusive<ShmWork>(
      getRank(), c10d::OpType::ALLREDUCE,
      [tensor = tensors[0], average](ShmAllreduce& shm) mutable { shm.allreduce(tensor, average); },
      tensors[0]));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupShm::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  if (tensors.size() != 1 || opts.rootTensor != 0 || !ShmAllreduce::supports_broadcast(tensors[0]))
    return fallback_->broadcast(tensors, opts);
  return enqueue(c10::make_intrusive<ShmWork>(
      getRank(), c10d::OpType::BROADCAST,
      [tensor = tensors[0], root = static_cast<int>(opts.rootRank)](ShmAllreduce& shm) mutable {
        shm.broadcast(tensor, root);
      },
      tensors[0]));
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
