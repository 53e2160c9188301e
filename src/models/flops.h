// The forward pass's floating-point operations, counted by running it: every convolution and
// matrix multiply ATen executes (2 x multiply-adds; the elementwise ops, normalisations and
// activations around them are a few percent and left out, as in torchvision's published
// "GFLOPS" column, which counts multiply-adds: ResNet-50 4.09 there is 8.18 GFLOP here).
// Training costs about 3x the forward (forward, and backward for inputs and for weights): the
// figure behind model FLOPs utilisation (MFU).
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include <cstdint>

namespace ddpx::models {

// FLOPs of `model.forward(input)` on this thread (run once without gradients, in evaluation
// mode; the model's mode is restored afterwards).
double count_forward_flops(torch::nn::AnyModule& model, const torch::Tensor& input);

}  // namespace ddpx::models
