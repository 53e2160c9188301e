// Each family's forward() written as layers (see layer_sequence.h).
#include "models/layer_sequence.h"

#include <cctype>
#include <string>
#include <utility>

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

namespace ddpx::models {
namespace {

torch::Tensor global_pool(const torch::Tensor& x) {
  return x.mean({2, 3});  // as the models' forward (resnet.cpp)
}

using Modules = std::vector<std::shared_ptr<torch::nn::Module>>;
using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

Layer make_layer(std::string name, Forward forward, const Modules& modules,
                 std::vector<torch::Tensor> extra = {}) {
  Layer layer{std::move(name), std::move(forward), std::move(extra), {}};
  for (const auto& m : modules) {
    for (auto& p : m->parameters()) layer.parameters.push_back(p);
    for (auto& b : m->buffers()) layer.buffers.push_back(b);
  }
  return layer;
}

// Each child of `sequential` a layer named prefix.child.
void add_children(std::vector<Layer>& layers, const std::string& prefix,
                  const torch::nn::Sequential& sequential) {
  const auto names = sequential->named_children();
  for (size_t i = 0; i < sequential->size(); ++i) {
    torch::nn::AnyModule child = *(sequential->begin() + static_cast<std::ptrdiff_t>(i));
    const std::string& key = names[i].key();
    layers.push_back(make_layer(
        prefix.empty() ? key : prefix + "." + key,
        [child](const torch::Tensor& x) mutable { return child.forward<torch::Tensor>(x); },
        {sequential->ptr(i)}));
  }
}

std::vector<Layer> resnet_layers(const std::shared_ptr<ResNetImpl>& m) {
  std::vector<Layer> layers;
  const bool maxpool = m->options().stem == Stem::kImagenet;
  layers.push_back(make_layer("stem",
                              [m, maxpool](const torch::Tensor& x) {
                                torch::Tensor y = m->relu(m->bn1(m->conv1(x)));
                                return maxpool ? m->maxpool(y) : y;
                              },
                              {m->conv1.ptr(), m->bn1.ptr()}));
  add_children(layers, "layer1", m->layer1);
  add_children(layers, "layer2", m->layer2);
  add_children(layers, "layer3", m->layer3);
  add_children(layers, "layer4", m->layer4);
  layers.push_back(make_layer("head", [m](const torch::Tensor& x) { return m->fc(global_pool(x)); },
                              {m->fc.ptr()}));
  return layers;
}

std::vector<Layer> cifar_resnet_layers(const std::shared_ptr<CifarResNetImpl>& m) {
  std::vector<Layer> layers;
  layers.push_back(
      make_layer("stem", [m](const torch::Tensor& x) { return torch::relu(m->bn1(m->conv1(x))); },
                 {m->conv1.ptr(), m->bn1.ptr()}));
  add_children(layers, "layer1", m->layer1);
  add_children(layers, "layer2", m->layer2);
  add_children(layers, "layer3", m->layer3);
  layers.push_back(make_layer("head",
                              [m](const torch::Tensor& x) {
                                return m->fc(x.mean({2, 3}));
                              },
                              {m->fc.ptr()}));
  return layers;
}

std::vector<Layer> vit_layers(const std::shared_ptr<VisionTransformerImpl>& m) {
  std::vector<Layer> layers;
  layers.push_back(make_layer("embed", [m](const torch::Tensor& x) { return m->embed(x); },
                              {m->conv_proj.ptr(), m->encoder->dropout.ptr()},
                              {m->class_token, m->encoder->pos_embedding}));
  add_children(layers, "encoder.layers", m->encoder->layers);
  layers.push_back(make_layer("head", [m](const torch::Tensor& x) { return m->head(x); },
                              {m->encoder->ln.ptr(), m->heads.ptr()}));
  return layers;
}

std::vector<Layer> mlp_layers(const std::shared_ptr<MlpImpl>& m) {
  return {
      make_layer("fc1", [m](const torch::Tensor& x) { return torch::relu(m->fc1(x.flatten(1))); },
                 {m->fc1.ptr()}),
      make_layer("fc2", [m](const torch::Tensor& x) { return torch::relu(m->fc2(x)); },
                 {m->fc2.ptr()}),
      make_layer("fc3", [m](const torch::Tensor& x) { return m->fc3(x); }, {m->fc3.ptr()})};
}

// The embeddings, each block, then the final LayerNorm and the head. The head's weight is the
// token embedding's (one Parameter): it is listed in both layers (see layer_sequence.h).
std::vector<Layer> gpt_layers(const std::shared_ptr<GptImpl>& m) {
  const GptTransformer& t = m->transformer;
  std::vector<Layer> layers;
  layers.push_back(make_layer("embed", [m](const torch::Tensor& x) { return m->embed(x); },
                              {t->wte.ptr(), t->wpe.ptr(), t->drop.ptr()}));
  for (size_t i = 0; i < t->h->size(); ++i) {
    auto block = t->h->ptr<GptBlockImpl>(i);
    layers.push_back(make_layer("transformer.h." + std::to_string(i),
                                [block](const torch::Tensor& x) { return block->forward(x); },
                                {block}));
  }
  layers.push_back(make_layer("head", [m](const torch::Tensor& x) { return m->head(x); },
                              {t->ln_f.ptr()}, {t->wte->weight}));
  return layers;
}

// The embeddings, each encoder layer, then the MLM head (transform, decoder). The decoder's weight
// is the word embedding's (one Parameter): it is listed in both the first and the last layer, the
// decoder's bias in the last only.
std::vector<Layer> bert_layers(const std::shared_ptr<BertImpl>& m) {
  const BertEmbeddings& e = m->bert->embeddings;
  const torch::nn::ModuleList& encoder = m->bert->encoder->layer;
  std::vector<Layer> layers;
  layers.push_back(
      make_layer("embed", [m](const torch::Tensor& x) { return m->embed(x); }, {e.ptr()}));
  for (size_t i = 0; i < encoder->size(); ++i) {
    auto layer = encoder->ptr<BertLayerImpl>(i);
    layers.push_back(make_layer("bert.encoder.layer." + std::to_string(i),
                                [layer](const torch::Tensor& x) { return layer->forward(x); },
                                {layer}));
  }
  layers.push_back(make_layer("head", [m](const torch::Tensor& x) { return m->head(x); },
                              {m->cls->predictions->transform.ptr()},
                              {e->word_embeddings->weight, m->cls->predictions->bias}));
  return layers;
}

// features, then pooling and the classifier: VGG, MobileNet v2/v3, EfficientNet, DenseNet.
template <typename Impl>
std::vector<Layer> features_layers(const std::shared_ptr<Impl>& m, Forward head,
                                   const Modules& head_modules) {
  std::vector<Layer> layers;
  add_children(layers, "features", m->features);
  layers.push_back(make_layer("head", std::move(head), head_modules));
  return layers;
}

// `name` as a prefix and a trailing index ("encoder.layers.encoder_layer_", 3), or index -1.
std::pair<std::string, long> indexed(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == name.size() || name.size() - digits > 9) return {name, -1};
  return {name.substr(0, digits), std::stol(name.substr(digits))};
}

std::vector<std::vector<int64_t>> shapes_of(const std::vector<torch::Tensor>& tensors) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& t : tensors) out.push_back(t.sizes().vec());
  return out;
}

}  // namespace

bool repeats(const Layer& a, const Layer& b) {
  const auto [prefix_a, index_a] = indexed(a.name);
  const auto [prefix_b, index_b] = indexed(b.name);
  return index_a >= 0 && prefix_a == prefix_b && index_b == index_a + 1 && !a.parameters.empty() &&
         shapes_of(a.parameters) == shapes_of(b.parameters) &&
         shapes_of(a.buffers) == shapes_of(b.buffers);
}

std::optional<std::vector<Layer>> layer_sequence(const torch::nn::AnyModule& model) {
  const std::shared_ptr<torch::nn::Module> module = model.ptr();
  if (auto m = std::dynamic_pointer_cast<ResNetImpl>(module)) return resnet_layers(m);
  if (auto m = std::dynamic_pointer_cast<CifarResNetImpl>(module)) return cifar_resnet_layers(m);
  if (auto m = std::dynamic_pointer_cast<VisionTransformerImpl>(module)) return vit_layers(m);
  if (auto m = std::dynamic_pointer_cast<MlpImpl>(module)) return mlp_layers(m);
  if (auto m = std::dynamic_pointer_cast<GptImpl>(module)) return gpt_layers(m);
  if (auto m = std::dynamic_pointer_cast<BertImpl>(module)) return bert_layers(m);
  if (auto m = std::dynamic_pointer_cast<VggImpl>(module)) {
    std::vector<Layer> layers;
    add_children(layers, "features", m->features);
    layers.push_back(make_layer(
        "avgpool", [m](const torch::Tensor& x) { return torch::flatten(m->avgpool(x), 1); }, {}));
    add_children(layers, "classifier", m->classifier);
    return layers;
  }
  if (auto m = std::dynamic_pointer_cast<MobileNetV2Impl>(module)) {
    return features_layers(
        m, [m](const torch::Tensor& x) { return m->classifier->forward(global_pool(x)); },
        {m->classifier.ptr()});
  }
  if (auto m = std::dynamic_pointer_cast<MobileNetV3Impl>(module)) {
    return features_layers(
        m, [m](const torch::Tensor& x) { return m->classifier->forward(global_pool(x)); },
        {m->classifier.ptr()});
  }
  if (auto m = std::dynamic_pointer_cast<EfficientNetImpl>(module)) {
    return features_layers(
        m, [m](const torch::Tensor& x) { return m->classifier->forward(global_pool(x)); },
        {m->classifier.ptr()});
  }
  if (auto m = std::dynamic_pointer_cast<DenseNetImpl>(module)) {
    return features_layers(
        m, [m](const torch::Tensor& x) { return m->classifier(global_pool(torch::relu(x))); },
        {m->classifier.ptr()});
  }
  return std::nullopt;
}

std::vector<Layer> layer_sequence(const torch::nn::Sequential& sequential) {
  std::vector<Layer> layers;
  add_children(layers, "", sequential);
  return layers;
}

}  // namespace ddpx::models
