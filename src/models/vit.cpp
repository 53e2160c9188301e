// Vision Transformer, mirroring torchvision/models/vision_transformer.py (0.14).
#include "models/vit.h"

#include <fmt/ranges.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <string>

#include "core/error.h"

namespace ddpx::models {
namespace {

namespace nn = torch::nn;

constexpr double kLayerNormEps = 1e-6;
constexpr double kPosEmbeddingStd = 0.02;  // "from BERT", as torchvision says
constexpr double kMlpBiasStd = 1e-6;

// torch.nn.init.trunc_normal_(t, std=std) with torchvision's absolute bounds [-2, 2]: inverse
// CDF sampling, as PyTorch does (libtorch's C++ API has no trunc_normal_).
void trunc_normal_(torch::Tensor& t, double std, double a = -2.0, double b = 2.0) {
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double low = cdf(a / std), high = cdf(b / std);
  t.uniform_(2 * low - 1, 2 * high - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(a, b);
}

std::string shape_of(const torch::Tensor& t) {
  return fmt::format("{}", fmt::join(t.sizes(), "x"));
}

}  // namespace

ViTEncoderBlockImpl::ViTEncoderBlockImpl(const ViTOptions& o) {
  ln_1 = register_module("ln_1",
                         nn::LayerNorm(nn::LayerNormOptions({o.hidden_dim}).eps(kLayerNormEps)));
  self_attention = register_module(
      "self_attention",
      nn::MultiheadAttention(
          nn::MultiheadAttentionOptions(o.hidden_dim, o.num_heads).dropout(o.attention_dropout)));
  dropout = register_module("dropout", nn::Dropout(o.dropout));
  ln_2 = register_module("ln_2",
                         nn::LayerNorm(nn::LayerNormOptions({o.hidden_dim}).eps(kLayerNormEps)));
  nn::Linear linear_1(o.hidden_dim, o.mlp_dim), linear_2(o.mlp_dim, o.hidden_dim);
  mlp = register_module("mlp", nn::Sequential(linear_1, nn::GELU(), nn::Dropout(o.dropout),
                                              linear_2, nn::Dropout(o.dropout)));
  // torchvision's MLPBlock: xavier_uniform_ weights, N(0, 1e-6) biases. The attention keeps
  // MultiheadAttention's own initialisation, as in PyTorch.
  torch::NoGradGuard no_grad;
  for (const nn::Linear& linear : {linear_1, linear_2}) {
    nn::init::xavier_uniform_(linear->weight);
    nn::init::normal_(linear->bias, 0, kMlpBiasStd);
  }
}

torch::Tensor ViTEncoderBlockImpl::forward(torch::Tensor input) {
  // libtorch's attention takes (S, B, D); torchvision's is batch_first.
  torch::Tensor x = ln_1(input).transpose(0, 1);
  x = std::get<0>(
      self_attention->forward(x, x, x, /*key_padding_mask=*/{}, /*need_weights=*/false));
  x = dropout(x.transpose(0, 1)) + input;  // (B, S, D)
  return x + mlp->forward(ln_2(x));
}

ViTEncoderImpl::ViTEncoderImpl(const ViTOptions& o) {
  const int64_t grid = o.image_size / o.patch_size;
  pos_embedding = register_parameter(
      "pos_embedding",
      torch::empty({1, grid * grid + 1, o.hidden_dim}).normal_(0, kPosEmbeddingStd));
  dropout = register_module("dropout", nn::Dropout(o.dropout));
  nn::Sequential blocks;
  for (int64_t i = 0; i < o.num_layers; ++i) {
    blocks->push_back("encoder_layer_" + std::to_string(i), ViTEncoderBlock(o));
  }
  layers = register_module("layers", blocks);
  ln =
      register_module("ln", nn::LayerNorm(nn::LayerNormOptions({o.hidden_dim}).eps(kLayerNormEps)));
}

torch::Tensor ViTEncoderImpl::forward(torch::Tensor x, int64_t grid_h, int64_t grid_w) {
  x = x + resize_position_embedding(pos_embedding, grid_h, grid_w);
  return ln(layers->forward(dropout(x)));
}

VisionTransformerImpl::VisionTransformerImpl(const ViTOptions& o) : options_(o) {
  DDPX_CHECK(o.num_classes >= 1, ErrorKind::kUsage, "ViT num_classes is {}; expected at least 1",
             o.num_classes);
  DDPX_CHECK(o.patch_size >= 1 && o.image_size >= o.patch_size && o.image_size % o.patch_size == 0,
             ErrorKind::kUsage, "ViT image size {} is not a positive multiple of its patch size {}",
             o.image_size, o.patch_size);
  DDPX_CHECK(o.num_heads >= 1 && o.hidden_dim % o.num_heads == 0, ErrorKind::kUsage,
             "ViT hidden_dim {} is not divisible by num_heads {}", o.hidden_dim, o.num_heads);
  conv_proj = register_module(
      "conv_proj",
      nn::Conv2d(nn::Conv2dOptions(3, o.hidden_dim, o.patch_size).stride(o.patch_size)));
  class_token = register_parameter("class_token", torch::zeros({1, 1, o.hidden_dim}));
  encoder = register_module("encoder", ViTEncoder(o));
  heads = register_module("heads", nn::Sequential());
  heads->push_back("head", nn::Linear(o.hidden_dim, o.num_classes));

  // torchvision: truncated normal with std sqrt(1 / fan_in) for the patch projection, bias 0;
  // a zero classifier head.
  torch::NoGradGuard no_grad;
  trunc_normal_(conv_proj->weight,
                std::sqrt(1.0 / static_cast<double>(3 * o.patch_size * o.patch_size)));
  nn::init::zeros_(conv_proj->bias);
  for (auto& p : heads->parameters()) nn::init::zeros_(p);
}

torch::Tensor VisionTransformerImpl::forward(torch::Tensor x) {
  return head(encoder->layers->forward(embed(std::move(x))));
}

torch::Tensor VisionTransformerImpl::embed(torch::Tensor x) {
  const int64_t p = options_.patch_size;
  DDPX_CHECK(x.dim() == 4 && x.size(1) == 3 && x.size(2) >= p && x.size(3) >= p &&
                 x.size(2) % p == 0 && x.size(3) % p == 0,
             ErrorKind::kUsage,
             "ViT with patch size {} expects input (B, 3, H, W) with H and W positive multiples of "
             "{}, got {}; resize with --image_size (e.g. {})",
             p, p, shape_of(x), options_.image_size);
  const int64_t n = x.size(0), grid_h = x.size(2) / p, grid_w = x.size(3) / p;
  x = conv_proj(x);                                                             // (B, D, gh, gw)
  x = x.reshape({n, options_.hidden_dim, grid_h * grid_w}).permute({0, 2, 1});  // (B, N, D)
  x = torch::cat({class_token.expand({n, -1, -1}), x}, 1);                      // (B, 1 + N, D)
  return encoder->dropout(x + resize_position_embedding(encoder->pos_embedding, grid_h, grid_w));
}

torch::Tensor VisionTransformerImpl::head(torch::Tensor x) {
  return heads->forward(encoder->ln(x).select(1, 0));  // (B, num_classes)
}

torch::Tensor resize_position_embedding(const torch::Tensor& pos, int64_t grid_h, int64_t grid_w) {
  DDPX_CHECK(pos.dim() == 3 && pos.size(0) == 1, ErrorKind::kData,
             "position embedding has shape {}; expected (1, 1 + grid^2, hidden_dim)",
             shape_of(pos));
  const int64_t tokens = pos.size(1) - 1;
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  DDPX_CHECK(side * side == tokens, ErrorKind::kData,
             "position embedding has {} patch tokens, not a square grid; expected (1, 1 + n*n, D)",
             tokens);
  if (side == grid_h && side == grid_w) return pos;
  const int64_t dim = pos.size(2);
  // (1, n*n, D) -> (1, D, n, n) -> resized (1, D, gh, gw) -> (1, gh*gw, D)
  torch::Tensor grid = pos.narrow(1, 1, tokens).permute({0, 2, 1}).reshape({1, dim, side, side});
  grid = torch::nn::functional::interpolate(
      grid, torch::nn::functional::InterpolateFuncOptions()
                .size(std::vector<int64_t>{grid_h, grid_w})
                .mode(torch::kBilinear)
                .align_corners(true));  // as torchvision's interpolate_embeddings
  grid = grid.reshape({1, dim, grid_h * grid_w}).permute({0, 2, 1});
  return torch::cat({pos.narrow(1, 0, 1), grid}, 1);
}

int64_t vit_parameter_count(const ViTOptions& o) {
  const int64_t d = o.hidden_dim, m = o.mlp_dim, grid = o.image_size / o.patch_size;
  const int64_t per_layer = 2 * d                     // ln_1
                            + 3 * d * d + 3 * d       // in_proj
                            + d * d + d               // out_proj
                            + 2 * d                   // ln_2
                            + d * m + m + m * d + d;  // mlp.0, mlp.3
  return 3 * o.patch_size * o.patch_size * d + d      // conv_proj
         + d                                          // class_token
         + (grid * grid + 1) * d                      // pos_embedding
         + o.num_layers * per_layer + 2 * d           // layers, ln
         + (d + 1) * o.num_classes;                   // heads.head
}

}  // namespace ddpx::models
