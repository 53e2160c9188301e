// The choices a user makes about communication, as enums: the CLI parses each flag once into
// these (cli/choices.h holds the names), and everything below it switches on them.
#pragma once

namespace ddpx::dist {

// Which backend reduces the model's tensors: NCCL (RCCL on ROCm) for GPU tensors, Gloo (or the
// shared-memory transport) for CPU ones. kAuto: NCCL when this process sees a GPU.
enum class BackendChoice { kAuto, kGloo, kNccl };

// How CPU tensors travel between ranks: kAuto uses shared memory when every rank is on this
// host and Gloo otherwise; kShm insists on shared memory; kGloo never uses it.
enum class Transport { kAuto, kShm, kGloo };

// How a full gradient bucket is reduced: allreduce (average in the gradients' dtype), or fp16 /
// bf16 compression (divide by the world size, cast, all-reduce, cast back when backward ends).
enum class CommHook { kAllreduce, kFp16Compress, kBf16Compress };

// Where the model and its batches live: kAuto is the GPU when this process sees one.
enum class DeviceChoice { kAuto, kCpu, kCuda };

const char* name(BackendChoice choice);
const char* name(DeviceChoice choice);
const char* name(Transport transport);
const char* name(CommHook hook);

}  // namespace ddpx::dist
