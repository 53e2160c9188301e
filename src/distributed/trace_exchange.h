// Multi-node jobs: on a collective failure each surviving rank sends its collective record to
// the others through the job's store and writes theirs beside its own (rank<K>.remote), so the
// timeout table, the rank's and its node launcher's, covers every node's ranks. Ranks that are
// dead or stopped cannot send; the table says "no record" for them, which is itself the clue.
#pragma once

#include <memory>

namespace c10d {
class Store;
}

namespace ddpx::trace {
class CollectiveTrace;
}

namespace ddpx::dist {

// Installs the exchange on `trace` (a no-op without a trace folder). It waits at most
// kExchangeWait for the other ranks and never blocks a failing rank longer, even when the
// store itself is gone.
void install_trace_exchange(trace::CollectiveTrace& trace, std::shared_ptr<c10d::Store> store);

}  // namespace ddpx::dist
