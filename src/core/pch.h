// Precompiled header: the heavy, stable headers every ddpx target uses.
// Only headers that never change belong here.
#pragma once

#include <fmt/format.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
