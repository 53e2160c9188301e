#include "cli/model_data_flags.h"

#include <map>

#include "cli/choices.h"
#include "cli/help_format.h"
#include "core/error.h"
#include "models/zoo/registry.h"
#include "train/options.h"

namespace ddpx::cli {

data::DatasetSpec ModelDataOptions::dataset_spec() const {
  data::DatasetSpec spec;
  spec.dataset = dataset;
  spec.data_dir = data_dir;
  spec.data_url = data_url;
  spec.val_url = val_url;
  spec.val_dir = val_dir;
  spec.val_split = val_split;
  spec.synthetic_height = spec.synthetic_width = synthetic_image;
  spec.synthetic_classes = synthetic_classes;
  spec.seq_len = seq_len > 0 ? seq_len : models::find_model(model).default_image_size;
  spec.vocab_size = vocab_size;
  return spec;
}

int64_t ModelDataOptions::input_size() const {
  const models::ModelInfo& info = models::find_model(model);
  if (image_size == train::kModelImageSize) return info.default_image_size;
  if (image_size > 0) return image_size;
  return models::fit_image_size(info, data::dataset_shape(dataset_spec()).image_size);
}

void add_model_data_flags(CLI::App* cmd, ModelDataOptions& o) {
  cmd->add_option("--model", o.model, "model name (`ddpx models` lists them)");
  add_choice(cmd, "--stem", o.stem, models::kStemNames,
             "ResNet stem: imagenet (7x7/2 + max-pool) or cifar (3x3/1)");
  add_choice(cmd, "--dataset", o.dataset, data::kDatasetNames,
             "fashion-mnist | mnist | cifar10 | cifar100 | synthetic | imagefolder (--data_dir "
             "DIR/<class>/*.jpg) | imagenet (DIR/train, DIR/val) | shards (DIR/train-*.tar, from "
             "`ddpx data pack`) | tokens (train.bin and val.bin "
             "token files in --data_dir, for a language model)");
  cmd->add_option("--data_dir", o.data_dir,
                  "dataset folder (default: the dataset's own; "
                  "fashion-mnist: Debian's dataset-fashion-mnist)");
  cmd->add_option("--data_url", o.data_url,
                  "tar shards on an HTTP(S) server, in place of --data_dir (implies --dataset "
                  "shards): 'http://host/shards/train-{000000..000099}.tar' (quoted: the shell "
                  "expands braces) or several URLs; each needs its .idx beside it")
      ->each([cmd, &o](const std::string&) {
        // Options are processed in the order they were added: --dataset's value is known here.
        DDPX_CHECK(cmd->count("--dataset") == 0 || o.dataset == data::DatasetId::kShards,
                   ErrorKind::kUsage,
                   "--data_url reads tar shards, but --dataset is {}: leave --dataset out (or "
                   "give --dataset shards), or train from --data_dir",
                   data::name(o.dataset));
        o.dataset = data::DatasetId::kShards;
      });
  cmd->add_option("--val_url", o.val_url,
                  "shards: the validation shards on an HTTP(S) server, beside --data_url (or "
                  "--data_dir): URLs as --data_url's, each with its .idx")
      ->each([&o](const std::string&) {
        DDPX_CHECK(o.dataset == data::DatasetId::kShards, ErrorKind::kUsage,
                   "--val_url reads validation tar shards, but --dataset is {}: give --data_url "
                   "(or --dataset shards --data_dir DIR) with it, or --val_dir for a folder",
                   data::name(o.dataset));
      });
  cmd->add_option(
      "--val_dir", o.val_dir,
      "imagefolder, imagenet: the validation folder (imagenet's default: DATA_DIR/val); "
      "shards: a folder of validation shards (default: DATA_DIR/val-*.tar)");
  cmd->add_option("--val_split", o.val_split,
                  "imagefolder and shards without a validation set: the share of DATA_DIR held "
                  "out for validation (the same files on every run)");
  cmd->add_option("--image_size", o.image_size,
                  "input size: N pixels square, model (the model's own: 224 for the ResNets) or 0 "
                  "(the dataset's, resized up where the model needs more)")
      ->transform(CLI::Transformer(std::map<std::string, std::string>{
                                       {"model", std::to_string(train::kModelImageSize)}})
                      .description(""));
  cmd->add_option("--synthetic_image", o.synthetic_image, "synthetic: image height = width");
  cmd->add_option("--synthetic_classes", o.synthetic_classes, "synthetic: classes");
  add_token_flags(cmd, o.seq_len, o.vocab_size);
  add_choice(cmd, "--windows", o.windows, data::kWindowsNames,
             "tokens: training windows every seq_len tokens from an epoch's offset (stride), or "
             "each started anywhere in the text, drawn from (seed, epoch, sample) (random: "
             "nanoGPT's get_batch); evaluation reads strides");
}

void add_token_flags(CLI::App* cmd, int64_t& seq_len, int64_t& vocab_size) {
  cmd->add_option("--seq_len", seq_len,
                  "a language model's window: the tokens a sequence feeds the model (0: the "
                  "model's context)");
  cmd->add_option(
      "--vocab_size", vocab_size,
      "a language model's vocabulary (0: train: the largest token in --dataset "
      "tokens' files + 1; plan, bench memory, tune: the model's tokenizer's, GPT-2's 50257 "
      "or BERT's 30522)");
}

void add_bias_flag(CLI::App* cmd, bool& bias) {
  add_switch(cmd, "bias", bias,
             "a GPT's biases in its Linears and LayerNorms, as GPT-2's (--no_bias: none, "
             "nanoGPT's bias=False; export --format hf needs them)");
}

}  // namespace ddpx::cli
