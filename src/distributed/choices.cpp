#include "distributed/choices.h"

namespace ddpx::dist {

const char* name(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::kGloo:
      return "gloo";
    case BackendChoice::kNccl:
      return "nccl";
    case BackendChoice::kAuto:
      break;
  }
  return "auto";
}

const char* name(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
    case DeviceChoice::kAuto:
      break;
  }
  return "auto";
}

const char* name(Transport transport) {
  switch (transport) {
    case Transport::kShm:
      return "shm";
    case Transport::kGloo:
      return "gloo";
    case Transport::kAuto:
      break;
  }
  return "auto";
}

const char* name(CommHook hook) {
  switch (hook) {
    case CommHook::kFp16Compress:
      return "fp16";
    case CommHook::kBf16Compress:
      return "bf16";
    case CommHook::kAllreduce:
      break;
  }
  return "allreduce";
}

}  // namespace ddpx::dist
