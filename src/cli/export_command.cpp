// `ddpx export --checkpoint C --out W.pt`: a checkpoint's weights as a state_dict that Python's
// torchvision.models.NAME(num_classes=N).load_state_dict(torch.load("W.pt")) accepts (with the
// CIFAR stem, once conv1 and maxpool are swapped as ddpx's stem has them; ddpx's own MLP and
// CIFAR ResNets have no torchvision class, and the line says so). With `--format hf` a GPT-2
// family model becomes a folder that transformers' GPT2LMHeadModel.from_pretrained loads, a
// BERT one a folder for BertForMaskedLM.from_pretrained.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "models/gpt.h"
#include "models/hf_bert.h"
#include "models/hf_gpt2.h"
#include "models/zoo/registry.h"
#include "train/checkpoint.h"
#include "train/pretrained.h"

namespace ddpx::cli {
namespace {

// How Python loads the file: the torchvision model that takes its keys, where there is one.
std::string python_loading(const train::CheckpointMeta& meta, models::Stem stem,
                           const std::string& out) {
  const std::string& family = models::find_model(meta.model).family;
  const std::string load = fmt::format("load_state_dict(torch.load(\"{}\"))", out);
  if (family == "gpt" || family == "bert")
    return fmt::format(
        "ddpx's {} (torchvision has no language models): torch.load(\"{}\") is its state_dict, "
        "keyed as Hugging Face's {} (--format hf writes the folder from_pretrained() reads)",
        meta.model, out, family == "gpt" ? "GPT2LMHeadModel" : "BertForMaskedLM");
  if (family == "mlp" || family == "cifar_resnet")
    return fmt::format(
        "ddpx's own {} (torchvision has no such model): torch.load(\"{}\") is its "
        "state_dict, keyed as `ddpx models` builds it",
        meta.model, out);
  if (stem == models::Stem::kCifar)
    return fmt::format(
        "the cifar stem (3x3 conv1, no max-pool); in Python, m = torchvision.models.{}("
        "num_classes={}); m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False); m.maxpool = "
        "torch.nn.Identity(); m.{}",
        meta.model, meta.num_classes, load);
  return fmt::format("in Python, torchvision.models.{}(num_classes={}).{}", meta.model,
                     meta.num_classes, load);
}

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint's weights as a PyTorch state_dict");
  auto checkpoint = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("torch");
  cmd->add_option("--checkpoint", *checkpoint, "a ddpx checkpoint (from --save_dir)")->required();
  cmd->add_option("--out", *out,
                  "the state_dict file to write (torch.load reads it); with --format hf, the "
                  "folder")
      ->required();
  cmd->add_option("--format", *format,
                  "torch: a torch.save state_dict; hf: a Hugging Face folder (config.json, "
                  "model.safetensors) for GPT-2-family and BERT models")
      ->check(CLI::IsMember({"torch", "hf"}))
      ->capture_default_str();
  cmd->callback([checkpoint, out, format, &exit_code] {
    train::CheckpointMeta meta = train::read_checkpoint_meta(*checkpoint);
    models::ModelConfig config;
    config.num_classes = meta.num_classes;
    config.stem = models::stem_from_name(meta.stem, *checkpoint + ": stem");
    if (meta.image_size > 0) config.image_size = meta.image_size;
    config.bias = meta.bias;
    auto model = models::create_model(meta.model, config);
    train::load_checkpoint_weights(*checkpoint, *model.ptr());
    if (*format == "hf") {
      DDPX_CHECK(meta.bias, ErrorKind::kUsage,
                 "{} was trained with --no_bias, and transformers' GPT2LMHeadModel has biases: "
                 "export it as a torch state_dict (leave out --format hf), or train with biases",
                 *checkpoint);
      if (auto bert = std::dynamic_pointer_cast<models::BertImpl>(model.ptr())) {
        models::export_hf_bert(*bert, *out);
        log::out(
            "wrote {} ({}, vocabulary {}): in Python, "
            "transformers.BertForMaskedLM.from_pretrained(\"{}\")",
            *out, meta.model, meta.num_classes, *out);
        exit_code = 0;
        return;
      }
      auto gpt = std::dynamic_pointer_cast<models::GptImpl>(model.ptr());
      DDPX_CHECK(
          gpt != nullptr, ErrorKind::kUsage,
          "--format hf writes GPT-2-family and BERT models (gpt2, gpt-nano, bert-base, ...); {} is "
          "not one: "
          "export it with --format torch",
          meta.model);
      models::export_hf_gpt2(*gpt, *out);
      log::out(
          "wrote {} ({}, vocabulary {}): in Python, "
          "transformers.GPT2LMHeadModel.from_pretrained(\"{}\")",
          *out, meta.model, meta.num_classes, *out);
      exit_code = 0;
      return;
    }
    train::export_state_dict(*model.ptr(), *out);
    log::out("wrote {} ({} {} classes): {}", *out, meta.model, meta.num_classes,
             python_loading(meta, config.stem, *out));
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
