// While the process group forms (Gloo's full mesh, the shared-memory arena, NCCL's
// communicator), every rank blocks until all of them take part. A rank that fails there, a bad
// GLOO_SOCKET_IFNAME on one node say, would leave the others waiting until --timeout. Instead
// the failing rank announces its error in the store, and a watcher thread on every other rank
// (on its own connection to the store) ends that rank at once, naming the one that failed. The
// watch lasts only while the group forms.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace c10d {
class Store;
}

namespace ddpx::dist {

class AbortWatch {
 public:
  // Watches `store` through a clone of it; without one (a store that cannot be cloned) it does
  // nothing.
  AbortWatch(const std::shared_ptr<c10d::Store>& store, int rank);
  ~AbortWatch() { stop(); }
  void stop();  // stops watching (before this rank announces its own failure)
  AbortWatch(const AbortWatch&) = delete;
  AbortWatch& operator=(const AbortWatch&) = delete;

  // Tells the other ranks that `rank` failed with `message` (best effort: never throws).
  static void announce(c10d::Store& store, int rank, const std::string& message);

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ddpx::dist
