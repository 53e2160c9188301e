#include "models/mlp.h"

#include <fmt/ranges.h>
#include <torch/nn/functional/activation.h>

#include "core/error.h"

namespace ddpx::models {

MlpImpl::MlpImpl(const MlpOptions& o) : in_features(o.in_features) {
  fc1 = register_module("fc1", torch::nn::Linear(o.in_features, o.hidden));
  fc2 = register_module("fc2", torch::nn::Linear(o.hidden, o.hidden / 2));
  fc3 = register_module("fc3", torch::nn::Linear(o.hidden / 2, o.num_classes));
}

torch::Tensor MlpImpl::forward(torch::Tensor x) {
  DDPX_CHECK(x.dim() >= 2 && x[0].numel() == in_features, ErrorKind::kUsage,
             "mlp expects {} input features per sample (3 x image_size^2), got shape {}",
             in_features, fmt::join(x.sizes(), "x"));
  x = x.flatten(1);                  // (B, C*H*W)
  x = torch::relu(fc1->forward(x));  // (B, hidden)
  x = torch::relu(fc2->forward(x));  // (B, hidden/2)
  return fc3->forward(x);            // (B, num_classes)
}

}  // namespace ddpx::models
