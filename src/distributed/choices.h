// The choices a user makes about communication, as enums with their names (core/names.h): the
// CLI parses each flag once through these tables, log lines print with them, and everything
// below cli/ switches on the enums.
#pragma once

#include "core/names.h"

namespace ddpx::dist {

// Which backend reduces the model's tensors: NCCL (RCCL on ROCm) for GPU tensors, Gloo (or the
// shared-memory transport) for CPU ones. kAuto: NCCL when this process sees a GPU.
enum class BackendChoice { kAuto, kGloo, kNccl };
inline constexpr NameTable<BackendChoice, 3> kBackendNames{{{BackendChoice::kAuto, "auto"},
                                                            {BackendChoice::kGloo, "gloo"},
                                                            {BackendChoice::kNccl, "nccl"}}};

// How CPU tensors travel between ranks: kAuto uses shared memory when every rank is on this
// host and Gloo otherwise; kShm insists on shared memory; kGloo never uses it.
enum class Transport { kAuto, kShm, kGloo };
inline constexpr NameTable<Transport, 3> kTransportNames{
    {{Transport::kAuto, "auto"}, {Transport::kShm, "shm"}, {Transport::kGloo, "gloo"}}};

// How a full gradient bucket is reduced: allreduce (average in the gradients' dtype), or fp16 /
// bf16 compression (divide by the world size, cast, all-reduce, cast back when backward ends).
enum class CommHook { kAllreduce, kFp16Compress, kBf16Compress, kPowerSgd };
inline constexpr NameTable<CommHook, 4> kCommHookNames{{{CommHook::kAllreduce, "allreduce"},
                                                        {CommHook::kFp16Compress, "fp16"},
                                                        {CommHook::kBf16Compress, "bf16"},
                                                        {CommHook::kPowerSgd, "powersgd"}}};

// Where the model and its batches live: kAuto is the GPU when this process sees one.
enum class DeviceChoice { kAuto, kCpu, kCuda };
inline constexpr NameTable<DeviceChoice, 3> kDeviceNames{
    {{DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}}};

inline const char* name(BackendChoice choice) { return name_of(kBackendNames, choice); }
inline const char* name(DeviceChoice choice) { return name_of(kDeviceNames, choice); }
inline const char* name(Transport transport) { return name_of(kTransportNames, transport); }
inline const char* name(CommHook hook) { return name_of(kCommHookNames, hook); }

}  // namespace ddpx::dist
