// Vision Transformer (ViT-B/16, B/32, L/16, timm aliases, and a tiny ViT for 28-32 px images)
// with torchvision 0.14's structure, names and initialisation: conv_proj, class_token,
// encoder.pos_embedding, encoder.layers.encoder_layer_N.{ln_1, self_attention, ln_2, mlp.0,
// mlp.3}, encoder.ln, heads.head, so keys match torchvision's state_dict.
//
// The position embedding always has the default patch grid's shape (torchvision's state_dict at
// its default image size, so checkpoints load whatever size the model is used at). An input of
// another size is accepted when its sides are multiples of the patch size: the grid part of the
// embedding is bilinearly resized to the input's patch grid on the fly, as timm's dynamic image
// size and torchvision's interpolate_embeddings do.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::models {

struct ViTOptions {
  int64_t image_size = 224;  // the position embedding's grid is (image_size / patch_size)^2
  int64_t patch_size = 16;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t hidden_dim = 768;
  int64_t mlp_dim = 3072;
  double dropout = 0.0;
  double attention_dropout = 0.0;
  int64_t num_classes = 1000;
};

// Pre-norm transformer block: x + attention(ln_1(x)), then + mlp(ln_2(.)). torchvision's
// EncoderBlock; `mlp` is Linear-GELU-Dropout-Linear-Dropout (keys mlp.0.*, mlp.3.*).
class ViTEncoderBlockImpl : public torch::nn::Module {
 public:
  explicit ViTEncoderBlockImpl(const ViTOptions& options);
  // x: (B, S, D) -> (B, S, D)
  torch::Tensor forward(torch::Tensor x);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::MultiheadAttention self_attention{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Sequential mlp{nullptr};
};
TORCH_MODULE(ViTEncoderBlock);

// torchvision's Encoder: adds the position embedding, runs the blocks, final LayerNorm.
class ViTEncoderImpl : public torch::nn::Module {
 public:
  explicit ViTEncoderImpl(const ViTOptions& options);
  // x: (B, 1 + gh * gw, D) with the class token first -> (B, 1 + gh * gw, D)
  torch::Tensor forward(torch::Tensor x, int64_t grid_h, int64_t grid_w);

  torch::Tensor pos_embedding;  // (1, 1 + grid^2, D) at the default grid
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Sequential layers{nullptr};
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(ViTEncoder);

class VisionTransformerImpl : public torch::nn::Module {
 public:
  explicit VisionTransformerImpl(const ViTOptions& options);
  // x: (B, 3, H, W) float, H and W multiples of patch_size -> logits (B, num_classes)
  torch::Tensor forward(torch::Tensor x);
  // forward() in three parts, for a pipeline's stages (layer_sequence.h):
  // head(encoder->layers->forward(embed(x))) is forward(x).
  torch::Tensor embed(torch::Tensor x);  // patches, class token, positions: (B, 1 + N, D)
  torch::Tensor head(torch::Tensor x);   // the encoder's LayerNorm, the class token's logits
  const ViTOptions& options() const { return options_; }

  torch::nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token;  // (1, 1, D)
  ViTEncoder encoder{nullptr};
  torch::nn::Sequential heads{nullptr};

 private:
  ViTOptions options_;
};
TORCH_MODULE(VisionTransformer);

// Resizes a (1, 1 + n*n, D) position embedding (class token first) to a grid_h x grid_w patch
// grid by bilinear interpolation of its grid part; the class token's embedding is kept. Returns
// `pos` itself when the grid already matches. Also useful to adapt a checkpoint offline.
torch::Tensor resize_position_embedding(const torch::Tensor& pos, int64_t grid_h, int64_t grid_w);

// The parameter count of a ViT built with `options`, without allocating it.
int64_t vit_parameter_count(const ViTOptions& options);

}  // namespace ddpx::models
