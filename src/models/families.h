// Assembles the zoo from every family's registration function (see families.cpp). Explicit
// calls rather than static self-registration, because unreferenced objects in a static library
// are dropped by the linker and their registrars would silently never run.
#pragma once

#include <vector>

#include "models/registry.h"

namespace ddpx::models {

std::vector<ModelInfo> build_model_table();

}  // namespace ddpx::models
