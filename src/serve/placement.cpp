// The one place that picks a job placement (placement.h) from the service's options.
#include "serve/placement.h"

#include "serve/local_placement.h"
#include "serve/scheduler.h"
#include "serve/slurm_placement.h"

namespace ddpx::serve {

std::unique_ptr<Placement> make_placement(Store& store, const SchedulerOptions& options) {
  if (options.slurm) return std::make_unique<SlurmPlacement>(store, options);
  return std::make_unique<LocalPlacement>(store, options);
}

}  // namespace ddpx::serve
