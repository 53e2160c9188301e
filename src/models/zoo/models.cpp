// The zoo: every model name, its family, default input size, recommended training settings and
// how it is built, one entry a line; the order here is the display order of `ddpx models`. A
// new model adds a line here (a new family: its module in models/<family>.{h,cpp} first).
// Listed explicitly rather than self-registered from static objects, because the linker drops
// unreferenced objects from a static library and their registration would never run.
#include <vector>

#include "models/bert.h"
#include "models/cifar_resnet.h"
#include "models/densenet.h"
#include "models/efficientnet.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "models/mobilenet.h"
#include "models/mobilenet_v3.h"
#include "models/resnet.h"
#include "models/vgg.h"
#include "models/vit.h"
#include "models/zoo/entry.h"

namespace ddpx::models {
namespace {

Factory resnet(BlockKind block, std::vector<int64_t> layers, int64_t groups = 1,
               int64_t width_per_group = 64) {
  ResNetOptions o{block, std::move(layers)};
  o.groups = groups;
  o.width_per_group = width_per_group;
  return factory<ResNet>(o, resnet_parameter_count);
}

Factory cifar_resnet(int64_t depth) {
  CifarResNetOptions o;
  o.blocks_per_stage = (depth - 2) / 6;
  return factory<CifarResNet>(o);
}

Factory vgg(int64_t depth, bool batch_norm) {
  VggOptions o;
  o.depth = depth;
  o.batch_norm = batch_norm;
  Factory f = factory<Vgg>(o, vgg_parameter_count);
  f.min_image_size = 32;  // five 2x2 max-pools: a smaller image pools to nothing
  return f;
}

Factory densenet(int64_t growth_rate, std::vector<int64_t> block_config,
                 int64_t num_init_features) {
  DenseNetOptions o;
  o.growth_rate = growth_rate;
  o.block_config = std::move(block_config);
  o.num_init_features = num_init_features;
  Factory f = factory<DenseNet>(o, densenet_parameter_count);
  f.min_image_size = 32;  // below 29 px its last transition pools to nothing; 32 as VGG
  return f;
}

Factory mobilenet_v2() {  // 3.5M parameters: counting by building is fast
  return {[](const ModelConfig& config) {
            return torch::nn::AnyModule(MobileNetV2(config.num_classes));
          },
          nullptr};
}

Factory mobilenet_v3(bool large) {
  MobileNetV3Options o;
  o.large = large;
  return factory<MobileNetV3>(o, mobilenet_v3_parameter_count);
}

Factory efficientnet(int variant) {
  return factory<EfficientNet>(efficientnet_options(variant), efficientnet_parameter_count);
}

// config.image_size does not change a ViT's structure: the position embedding keeps the
// default grid and is resized per input (see vit.h).
Factory vit(int64_t image, int64_t patch, int64_t layers, int64_t heads, int64_t dim, int64_t mlp) {
  ViTOptions o;
  o.image_size = image;
  o.patch_size = patch;
  o.num_layers = layers;
  o.num_heads = heads;
  o.hidden_dim = dim;
  o.mlp_dim = mlp;
  Factory f = factory<VisionTransformer>(o, vit_parameter_count);
  f.min_image_size = f.image_multiple = patch;  // whole patches only
  return f;
}

Factory mlp() {  // the only model whose structure follows the input size
  return {[](const ModelConfig& config) {
            MlpOptions o;
            o.in_features = 3 * config.image_size * config.image_size;
            o.num_classes = config.num_classes;
            return torch::nn::AnyModule(Mlp(o));
          },
          nullptr};
}

// A language model's vocabulary is the data's class count: every token is a class of the
// next-token prediction (50257 for GPT-2's tokenizer, the alphabet for characters).
Factory gpt(int64_t layers, int64_t heads, int64_t dim, int64_t context) {
  GptOptions o;
  o.n_layer = layers;
  o.n_head = heads;
  o.n_embd = dim;
  o.block_size = context;
  auto with_vocab = [o](const ModelConfig& config) {
    GptOptions v = o;
    v.vocab_size = config.num_classes;
    if (config.layers > 0) v.n_layer = config.layers;
    v.bias = config.bias;
    return v;
  };
  Factory f{
      [with_vocab](const ModelConfig& config) {
        return torch::nn::AnyModule(Gpt(with_vocab(config)));
      },
      [with_vocab](const ModelConfig& config) { return gpt_parameter_count(with_vocab(config)); }};
  f.blocks = layers;
  f.vocab_size = 50257;
  return f;
}

// BERT's vocabulary is the data's class count too (30522 for bert-base-uncased's vocab.txt).
Factory bert(int64_t layers, int64_t heads, int64_t dim, int64_t positions) {
  BertOptions o;
  o.num_hidden_layers = layers;
  o.num_attention_heads = heads;
  o.hidden_size = dim;
  o.intermediate_size = 4 * dim;
  o.max_position_embeddings = positions;
  auto with_vocab = [o](const ModelConfig& config) {
    BertOptions v = o;
    v.vocab_size = config.num_classes;
    if (config.layers > 0) v.num_hidden_layers = config.layers;
    return v;
  };
  Factory f{
      [with_vocab](const ModelConfig& config) {
        return torch::nn::AnyModule(Bert(with_vocab(config)));
      },
      [with_vocab](const ModelConfig& config) { return bert_parameter_count(with_vocab(config)); }};
  f.blocks = layers;
  f.vocab_size = 30522;
  return f;
}

}  // namespace

std::vector<ModelInfo> build_model_table() {
  const auto basic = BlockKind::kBasic;
  const auto bottleneck = BlockKind::kBottleneck;
  // Recommendations: {optimizer, lr, batch, weight decay, normalize, note}.
  // resnet18 and resnet101 carry the seed's settings; the rest follow torchvision's reference
  // recipe (SGD momentum 0.9, lr 0.1 per 256 images, weight decay 1e-4).
  const Recommendation tv_resnet{"sgd", 0.1, 256, 1e-4};
  // He et al. 2016's CIFAR recipe: SGD 0.1, momentum 0.9, weight decay 1e-4, batch 128.
  const Recommendation he_cifar{"sgd", 0.1,       128,
                                1e-4,  "dataset", "He et al. 2016 CIFAR ResNet, 28-32 px"};
  // torchvision's reference recipe for VGG: SGD lr 0.01 for batch 256, weight decay 1e-4.
  const Recommendation tv_vgg{"sgd", 0.01, 256, 1e-4};
  // The DenseNet paper's ImageNet recipe (torchvision ported those weights).
  const Recommendation densenet_paper{"sgd", 0.1, 256, 1e-4};
  // torchvision's reference recipe for MobileNetV2. It trained the V3s with RMSprop (lr 0.064,
  // batch 1024, wd 1e-5), which ddpx does not offer; V2's SGD recipe is the closest setting.
  const Recommendation tv_mobilenet{"sgd", 0.045, 256, 4e-5};
  const Recommendation tv_mobilenet_v3{"sgd", 0.045, 256, 4e-5, "imagenet", "tv: rmsprop"};
  // The seed tool's setting for efficientnet_b0, kept for the family.
  const Recommendation seed_efficientnet{"adamw", 0.001, 256, 1e-5};
  // The seed tool's setting for vit_base_patch16_224, kept for the family; the tiny model
  // trains from scratch with a larger lr.
  auto seed_vit = [](std::string note = "") {
    return Recommendation{"adamw", 1e-4, 128, 0.05, "imagenet", std::move(note)};
  };
  return {
      entry("resnet18", "resnet", 224, {"sgd", 0.001, 256, 0.0, "imagenet", "quick test"},
            resnet(basic, {2, 2, 2, 2})),
      entry("resnet34", "resnet", 224, tv_resnet, resnet(basic, {3, 4, 6, 3})),
      entry("resnet50", "resnet", 224, tv_resnet, resnet(bottleneck, {3, 4, 6, 3})),
      entry("resnet101", "resnet", 224, {"sgd", 0.002, 1024, 0.0, "neg_one_one"},
            resnet(bottleneck, {3, 4, 23, 3})),
      entry("resnet152", "resnet", 224, tv_resnet, resnet(bottleneck, {3, 8, 36, 3})),
      entry("wide_resnet50_2", "resnet", 224, tv_resnet,
            resnet(bottleneck, {3, 4, 6, 3}, /*groups=*/1, /*width_per_group=*/128)),
      entry("resnext50_32x4d", "resnet", 224, tv_resnet,
            resnet(bottleneck, {3, 4, 6, 3}, /*groups=*/32, /*width_per_group=*/4)),

      entry("resnet20", "cifar_resnet", 32, he_cifar, cifar_resnet(20)),
      entry("resnet32", "cifar_resnet", 32, he_cifar, cifar_resnet(32)),
      entry("resnet44", "cifar_resnet", 32, he_cifar, cifar_resnet(44)),
      entry("resnet56", "cifar_resnet", 32, he_cifar, cifar_resnet(56)),

      entry("vgg11", "vgg", 224, tv_vgg, vgg(11, false)),
      entry("vgg11_bn", "vgg", 224, tv_vgg, vgg(11, true)),
      entry("vgg13", "vgg", 224, tv_vgg, vgg(13, false)),
      entry("vgg13_bn", "vgg", 224, tv_vgg, vgg(13, true)),
      entry("vgg16", "vgg", 224, tv_vgg, vgg(16, false)),
      entry("vgg16_bn", "vgg", 224, tv_vgg, vgg(16, true)),
      entry("vgg19", "vgg", 224, tv_vgg, vgg(19, false)),
      entry("vgg19_bn", "vgg", 224, tv_vgg, vgg(19, true)),

      entry("densenet121", "densenet", 224, densenet_paper, densenet(32, {6, 12, 24, 16}, 64)),
      entry("densenet161", "densenet", 224, densenet_paper, densenet(48, {6, 12, 36, 24}, 96)),
      entry("densenet169", "densenet", 224, densenet_paper, densenet(32, {6, 12, 32, 32}, 64)),
      entry("densenet201", "densenet", 224, densenet_paper, densenet(32, {6, 12, 48, 32}, 64)),

      entry("mobilenet_v2", "mobilenet", 224, tv_mobilenet, mobilenet_v2()),
      entry("mobilenet_v3_small", "mobilenet", 224, tv_mobilenet_v3, mobilenet_v3(false)),
      entry("mobilenet_v3_large", "mobilenet", 224, tv_mobilenet_v3, mobilenet_v3(true)),

      entry("efficientnet_b0", "efficientnet", efficientnet_image_size(0), seed_efficientnet,
            efficientnet(0)),
      entry("efficientnet_b1", "efficientnet", efficientnet_image_size(1), seed_efficientnet,
            efficientnet(1)),
      entry("efficientnet_b2", "efficientnet", efficientnet_image_size(2), seed_efficientnet,
            efficientnet(2)),
      entry("efficientnet_b3", "efficientnet", efficientnet_image_size(3), seed_efficientnet,
            efficientnet(3)),
      entry("efficientnet_b4", "efficientnet", efficientnet_image_size(4), seed_efficientnet,
            efficientnet(4)),
      entry("efficientnet_b5", "efficientnet", efficientnet_image_size(5), seed_efficientnet,
            efficientnet(5)),
      entry("efficientnet_b6", "efficientnet", efficientnet_image_size(6), seed_efficientnet,
            efficientnet(6)),
      entry("efficientnet_b7", "efficientnet", efficientnet_image_size(7), seed_efficientnet,
            efficientnet(7)),

      entry("vit_b_16", "vit", 224, seed_vit(), vit(224, 16, 12, 12, 768, 3072)),
      entry("vit_b_32", "vit", 224, seed_vit(), vit(224, 32, 12, 12, 768, 3072)),
      entry("vit_l_16", "vit", 224, seed_vit(), vit(224, 16, 24, 16, 1024, 4096)),
      entry("vit_base_patch16_224", "vit", 224, seed_vit("timm name of vit_b_16"),
            vit(224, 16, 12, 12, 768, 3072)),
      entry("vit_base_patch32_224", "vit", 224, seed_vit("timm name of vit_b_32"),
            vit(224, 32, 12, 12, 768, 3072)),
      entry("vit_large_patch16_224", "vit", 224, seed_vit("timm name of vit_l_16"),
            vit(224, 16, 24, 16, 1024, 4096)),
      entry("vit_tiny_patch4_32", "vit", 32,
            {"adamw", 1e-3, 128, 0.05, "imagenet", "28-32 px images"}, vit(32, 4, 6, 3, 192, 768)),

      // GPT-2 (Radford et al. 2019) with llm.c's recipe for 124M (AdamW 6e-4, wd 0.1, 524,288
      // tokens a step); gpt-nano is nanoGPT's CPU configuration of shakespeare_char. The size
      // column is the context.
      entry("gpt2", "gpt", 1024, {"adamw", 6e-4, 512, 0.1, "none", "124M at 50257 tokens"},
            gpt(12, 12, 768, 1024)),
      entry("gpt2-medium", "gpt", 1024, {"adamw", 3e-4, 512, 0.1, "none", "350M"},
            gpt(24, 16, 1024, 1024)),
      entry("gpt2-large", "gpt", 1024, {"adamw", 2.5e-4, 512, 0.1, "none", "774M"},
            gpt(36, 20, 1280, 1024)),
      entry("gpt2-xl", "gpt", 1024, {"adamw", 2e-4, 512, 0.1, "none", "1.5B"},
            gpt(48, 25, 1600, 1024)),
      entry("gpt-nano", "gpt", 64, {"adamw", 1e-3, 12, 0.1, "none", "nanoGPT CPU size"},
            gpt(4, 4, 128, 64)),

      // BERT (Devlin et al. 2019), trained with masked-LM; the recipe is the paper's (Adam 1e-4,
      // wd 0.01, 256 sequences of 512). bert-nano is a CPU size for tests and examples. The
      // size column is the positions.
      entry("bert-base", "bert", 512, {"adamw", 1e-4, 256, 0.01, "none", "110M at 30522 tokens"},
            bert(12, 12, 768, 512)),
      entry("bert-large", "bert", 512, {"adamw", 1e-4, 256, 0.01, "none", "340M"},
            bert(24, 16, 1024, 512)),
      entry("bert-nano", "bert", 128, {"adamw", 1e-3, 16, 0.01, "none", "CPU size"},
            bert(4, 4, 128, 128)),

      entry("mlp", "mlp", 28, {"adam", 1e-3, 128, 0.0, "dataset", "smoke test, no BatchNorm"},
            mlp()),
  };
}

}  // namespace ddpx::models
