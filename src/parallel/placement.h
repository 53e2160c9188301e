// Putting the model and its batches on the training device. Batches reach a GPU as PyTorch's
// fastest input pipelines do it: built in page-locked (pinned) memory by the loader's threads,
// copied without blocking on a side stream one batch ahead, so the copy of batch k+1 overlaps
// the step on batch k; the compute stream waits for the copy on the GPU, not on the host.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <optional>
#include <vector>

#include "data/loader.h"

namespace ddpx::parallel {

// Moves every parameter and buffer to `device`; with `channels_last`, 4-d ones (convolution
// weights) also take the NHWC memory format, which cuDNN's fastest kernels use.
void place_model(torch::nn::Module& model, const torch::Device& device, bool channels_last);

// The same for some of a module's parameters and buffers (a pipeline rank's stages), each moved
// in place (set_data: modules, optimizers and autograd keep them).
void place_tensors(const std::vector<torch::Tensor>& tensors, const torch::Device& device,
                   bool channels_last);

// Batches of one epoch from `loader`, on `device` (channels_last images when asked). Must not
// outlive the loader.
class DeviceFeeder {
 public:
  DeviceFeeder(data::DataLoader& loader, const torch::Device& device, bool channels_last);

  // The next batch, ready for work queued on the device's current stream; nullopt at the end.
  std::optional<data::Batch> next();

  // Host seconds spent waiting for the loader so far (the data wait).
  double wait_seconds() const { return wait_seconds_; }
  // The side stream of the copies (GPUs only): the same for every feeder of a device.
  const std::optional<c10::Stream>& copy_stream() const { return copy_stream_; }

 private:
  struct Staged {
    data::Batch batch;
    std::optional<c10::Event> copied;  // recorded on the copy stream after the copy
  };
  std::optional<Staged> stage();  // takes a host batch and queues its copy

  data::DataLoader& loader_;
  torch::Device device_;
  bool channels_last_;
  std::optional<c10::Stream> copy_stream_;  // GPUs only
  std::optional<Staged> staged_;
  bool primed_ = false;
  double wait_seconds_ = 0;
};

}  // namespace ddpx::parallel
