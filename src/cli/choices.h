// The names users type for ddpx's enum-valued flags, parsed once here into the enums the
// libraries switch on. An unknown name is refused by CLI11 with the flag and the valid names.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "distributed/choices.h"
#include "optim/amp.h"
#include "train/optim.h"

namespace ddpx::cli {

inline const std::map<std::string, dist::BackendChoice> kBackendNames{
    {"auto", dist::BackendChoice::kAuto},
    {"gloo", dist::BackendChoice::kGloo},
    {"nccl", dist::BackendChoice::kNccl}};

inline const std::map<std::string, dist::DeviceChoice> kDeviceNames{
    {"auto", dist::DeviceChoice::kAuto},
    {"cpu", dist::DeviceChoice::kCpu},
    {"cuda", dist::DeviceChoice::kCuda}};

inline const std::map<std::string, optim::Amp> kAmpNames{
    {"off", optim::Amp::kOff}, {"bf16", optim::Amp::kBf16}, {"fp16", optim::Amp::kFp16}};

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

inline const std::map<std::string, train::LrScale> kLrScaleNames{
    {"none", train::LrScale::kNone},
    {"linear", train::LrScale::kLinear},
    {"sqrt", train::LrScale::kSqrt}};

// Adds `flag` to `app`, parsed into `value` through `names`; --help shows the names and the
// current value as the default, and an unknown name is refused naming the valid ones.
template <typename E>
CLI::Option* add_choice(CLI::App* app, const std::string& flag, E& value,
                        const std::map<std::string, E>& names, const std::string& help) {
  std::vector<std::string> valid;
  std::string current;
  for (const auto& [name, choice] : names) {
    valid.push_back(name);
    if (choice == value) current = name;
  }
  return app
      ->add_option_function<std::string>(
          flag, [&value, &names](const std::string& name) { value = names.at(name); }, help)
      ->check(CLI::IsMember(valid))
      ->default_str(current);
}

}  // namespace ddpx::cli
