// --shard: what a sharded plan splits across the ranks, ZeRO's stages by FSDP's words.
//   none       nothing (the data-parallel plan: DDP)
//   optimizer  ZeRO-1: optimizer state; every rank keeps whole parameters and gradients
//   gradients  ZeRO-2: optimizer state and gradients (each rank keeps its averaged shard)
//   full       ZeRO-3 / FSDP: parameters too, gathered unit by unit for forward and backward
//              and released after each
#pragma once

#include "core/names.h"

namespace ddpx::parallel {

enum class ShardMode { kNone, kOptimizer, kGradients, kFull };
inline constexpr NameTable<ShardMode, 4> kShardModeNames{{{ShardMode::kNone, "none"},
                                                          {ShardMode::kOptimizer, "optimizer"},
                                                          {ShardMode::kGradients, "gradients"},
                                                          {ShardMode::kFull, "full"}}};
inline const char* name(ShardMode mode) { return name_of(kShardModeNames, mode); }

// "ZeRO-1" ... for the start-up line; "" for kNone.
inline const char* zero_stage(ShardMode mode) {
  switch (mode) {
    case ShardMode::kOptimizer:
      return "ZeRO-1";
    case ShardMode::kGradients:
      return "ZeRO-2";
    case ShardMode::kFull:
      return "ZeRO-3";
    case ShardMode::kNone:
      break;
  }
  return "";
}

}  // namespace ddpx::parallel
