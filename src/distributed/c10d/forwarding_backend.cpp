// Every call handed to the inner backend (see forwarding_backend.h).
#include "distributed/c10d/forwarding_backend.h"

namespace ddpx::dist {

using c10d::Work;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

ForwardingBackend::ForwardingBackend(c10::intrusive_ptr<c10d::Backend> inner)
    : c10d::Backend(inner->getRank(), inner->getSize()), inner_(std::move(inner)) {}

ForwardingBackend::~ForwardingBackend() {
  if (abandoned_) inner_.release();  // the reference is leaked on purpose
}

void ForwardingBackend::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  inner_->setGroupUid(pg_uid);
}
void ForwardingBackend::eagerConnectSingleDevice(at::Device device) {
  inner_->eagerConnectSingleDevice(device);
}

c10::intrusive_ptr<Work> ForwardingBackend::broadcast(Tensors& t, const c10d::BroadcastOptions& o) {
  return inner_->broadcast(t, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::allreduce(Tensors& t, const c10d::AllreduceOptions& o) {
  return inner_->allreduce(t, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::allreduce_sparse(Tensors& t,
                                                             const c10d::AllreduceOptions& o) {
  return inner_->allreduce_sparse(t, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::allreduce_coalesced(
    Tensors& t, const c10d::AllreduceCoalescedOptions& o) {
  return inner_->allreduce_coalesced(t, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::reduce(Tensors& t, const c10d::ReduceOptions& o) {
  return inner_->reduce(t, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::allgather(TensorLists& out, Tensors& in,
                                                      const c10d::AllgatherOptions& o) {
  return inner_->allgather(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::_allgather_base(at::Tensor& out, at::Tensor& in,
                                                            const c10d::AllgatherOptions& o) {
  return inner_->_allgather_base(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::allgather_coalesced(TensorLists& out, Tensors& in,
                                                                const c10d::AllgatherOptions& o) {
  return inner_->allgather_coalesced(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::allgather_into_tensor_coalesced(
    Tensors& out, Tensors& in, const c10d::AllgatherOptions& o) {
  return inner_->allgather_into_tensor_coalesced(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::gather(TensorLists& out, Tensors& in,
                                                   const c10d::GatherOptions& o) {
  return inner_->gather(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::scatter(Tensors& out, TensorLists& in,
                                                    const c10d::ScatterOptions& o) {
  return inner_->scatter(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::reduce_scatter(Tensors& out, TensorLists& in,
                                                           const c10d::ReduceScatterOptions& o) {
  return inner_->reduce_scatter(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::_reduce_scatter_base(
    at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) {
  return inner_->_reduce_scatter_base(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::reduce_scatter_tensor_coalesced(
    Tensors& out, Tensors& in, const c10d::ReduceScatterOptions& o) {
  return inner_->reduce_scatter_tensor_coalesced(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::alltoall_base(at::Tensor& out, at::Tensor& in,
                                                          std::vector<int64_t>& out_splits,
                                                          std::vector<int64_t>& in_splits,
                                                          const c10d::AllToAllOptions& o) {
  return inner_->alltoall_base(out, in, out_splits, in_splits, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::alltoall(Tensors& out, Tensors& in,
                                                     const c10d::AllToAllOptions& o) {
  return inner_->alltoall(out, in, o);
}
c10::intrusive_ptr<Work> ForwardingBackend::send(Tensors& t, int dst, int tag) {
  return inner_->send(t, dst, tag);
}
c10::intrusive_ptr<Work> ForwardingBackend::recv(Tensors& t, int src, int tag) {
  return inner_->recv(t, src, tag);
}
c10::intrusive_ptr<Work> ForwardingBackend::recvAnysource(Tensors& t, int tag) {
  return inner_->recvAnysource(t, tag);
}
c10::intrusive_ptr<Work> ForwardingBackend::barrier(const c10d::BarrierOptions& o) {
  return inner_->barrier(o);
}

}  // namespace ddpx::dist
