// The gate in front of released parameters (see param_gate.h).
#include "parallel/sharded/param_gate.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

namespace ddpx::parallel {
namespace {

struct Watched {
  ParamGate* gate;
  int unit;
};

// Storage -> (gate, unit), for every gate of the process (test ranks are threads of one
// process, each with its own plan).
std::shared_mutex g_mutex;
std::unordered_map<const void*, Watched> g_watched;
std::atomic<size_t> g_count{0};

thread_local bool t_inside = false;  // the listener is running, or paused

}  // namespace

struct GateCallback {
  static void collect(const c10::IValue& value, std::vector<std::pair<ParamGate*, int>>& touched) {
    auto visit = [&](const at::Tensor& t) {
      if (!t.defined() || !t.has_storage()) return;
      auto it = g_watched.find(t.storage().unsafeGetStorageImpl());
      if (it == g_watched.end()) return;
      std::pair<ParamGate*, int> key{it->second.gate, it->second.unit};
      if (std::find(touched.begin(), touched.end(), key) == touched.end()) touched.push_back(key);
    };
    if (value.isTensor()) {
      visit(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) visit(t);
    } else if (value.isList()) {
      for (const c10::IValue& v : value.toListRef()) {
        if (v.isTensor()) visit(v.toTensor());
      }
    }
  }

  static std::unique_ptr<at::ObserverContext> start(const at::RecordFunction& fn) {
    if (t_inside || g_count.load(std::memory_order_relaxed) == 0) return nullptr;
    std::vector<std::pair<ParamGate*, int>> touched;
    {
      std::shared_lock lock(g_mutex);
      for (const c10::IValue& input : fn.inputs()) collect(input, touched);
    }
    if (touched.empty()) return nullptr;
    ParamGate* gate = touched.front().first;
    std::vector<int> units;
    for (const auto& [g, unit] : touched) {
      if (g == gate) units.push_back(unit);
    }
    t_inside = true;
    try {
      gate->listener_.on_use(units);
    } catch (...) {
      if (!gate->pending_) gate->pending_ = std::current_exception();
    }
    t_inside = false;
    return nullptr;
  }
};

ParamGate::ParamGate(GateListener& listener) : listener_(listener) {
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&GateCallback::start)
                                           .needsInputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
}

ParamGate::~ParamGate() {
  {
    std::unique_lock lock(g_mutex);
    for (const void* s : storages_) g_watched.erase(s);
    g_count.store(g_watched.size());
  }
  at::removeCallback(handle_);
}

void ParamGate::watch(const torch::Tensor& param, int unit) {
  std::unique_lock lock(g_mutex);
  const void* storage = param.storage().unsafeGetStorageImpl();
  g_watched[storage] = Watched{this, unit};
  storages_.push_back(storage);
  g_count.store(g_watched.size());
}

void ParamGate::rethrow_pending() {
  if (!pending_) return;
  auto error = std::exchange(pending_, nullptr);
  std::rethrow_exception(error);
}

ParamGate::Pause::Pause() : was_(t_inside) { t_inside = true; }
ParamGate::Pause::~Pause() { t_inside = was_; }

}  // namespace ddpx::parallel
