// c10d's Flight Recorder (a ring buffer of every collective, which PyTorch's NCCL watchdog dumps)
// is turned off unless TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE says otherwise.
// ddpx keeps a collective record of its own (trace/collective_trace.h), and in torch 2.11 the
// recorder adds each process group to a process-wide map without holding its lock
// (FlightRecorder::recordWithResetEnabled), so the first collectives of two groups at once -
// two ranks run as threads of one process, or two groups of one job - can corrupt the map and
// crash (seen: a SIGSEGV in ProcessGroupGloo::enqueue). It also captures a traceback for every
// collective, which ddpx has no use for.
//
// Call before the first process group exists, while one thread runs (main(), a static
// initializer); dist::init() calls it too, for programs that embed ddpx. Torch-free: it only
// sets the environment variable libtorch reads when the recorder is first used.
#pragma once

namespace ddpx {

void disable_flight_recorder();

}  // namespace ddpx
