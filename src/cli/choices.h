// The names users type for ddpx's enum-valued flags, parsed once here into the enums the
// libraries switch on. An unknown name is refused by CLI11 with the flag and the valid names.
#pragma once

#include <map>
#include <string>

#include "dist/choices.h"
#include "train/optim.h"

namespace ddpx::cli {

inline const std::map<std::string, dist::BackendChoice> kBackendNames{
    {"auto", dist::BackendChoice::kAuto},
    {"gloo", dist::BackendChoice::kGloo},
    {"nccl", dist::BackendChoice::kNccl}};

inline const std::map<std::string, dist::Transport> kTransportNames{
    {"auto", dist::Transport::kAuto},
    {"shm", dist::Transport::kShm},
    {"gloo", dist::Transport::kGloo}};

inline const std::map<std::string, dist::CommHook> kCommHookNames{
    {"allreduce", dist::CommHook::kAllreduce},
    {"fp16", dist::CommHook::kFp16Compress},
    {"bf16", dist::CommHook::kBf16Compress}};

inline const std::map<std::string, train::Schedule> kScheduleNames{
    {"constant", train::Schedule::kConstant},
    {"step", train::Schedule::kStep},
    {"cosine", train::Schedule::kCosine}};

}  // namespace ddpx::cli
