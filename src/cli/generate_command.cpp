// `ddpx generate --checkpoint C | --pretrained DIR --prompt TEXT`: text sampled from a GPT,
// through the key/value cache: a checkpoint of `ddpx train`, or GPT-2 weights as Hugging Face's
// save_pretrained writes them. The prompt is encoded and the tokens decoded with `--vocab`
// (text/vocabulary.h): the vocab.json that `ddpx data tokenize` wrote beside the training data
// (characters, or GPT-2's BPE), or GPT-2's tiktoken rank file, by default where `ddpx data
// download gpt2-vocab` puts it. A human's check of what the model learned.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "models/gpt_generate.h"
#include "models/hf_gpt2.h"
#include "models/zoo/registry.h"
#include "text/hf_bpe.h"
#include "text/tokenize.h"
#include "text/vocabulary.h"
#include "train/checkpoint.h"

namespace ddpx::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint, pretrained, vocab, prompt = "\n", device = "cpu";
  models::SamplingOptions sampling;
  bool no_cache = false, tokens = false;
};

// The checkpoint's model, which must be a GPT, with its weights.
models::Gpt load_checkpoint_gpt(const std::string& checkpoint) {
  const train::CheckpointMeta meta = train::read_checkpoint_meta(checkpoint);
  const models::ModelInfo& info = models::find_model(meta.model);
  DDPX_CHECK(info.family == "gpt", ErrorKind::kUsage,
             "{} holds a {} ({}), not a language model; generate takes the checkpoint of a GPT "
             "(ddpx train --model gpt-nano --dataset tokens ...)",
             checkpoint, meta.model, info.family);
  models::ModelConfig config;
  config.num_classes = meta.num_classes;
  config.bias = meta.bias;
  torch::nn::AnyModule any = models::create_model(meta.model, config);
  train::load_checkpoint_weights(checkpoint, *any.ptr());
  auto gpt = std::dynamic_pointer_cast<models::GptImpl>(any.ptr());
  DDPX_CHECK(gpt != nullptr, ErrorKind::kInternal, "model {} of family gpt is no GptImpl",
             meta.model);
  return models::Gpt(gpt);
}

// A GPT of the shape DIR/config.json gives, with DIR's weights.
models::Gpt load_pretrained_gpt(const std::string& dir) {
  DDPX_CHECK(std::filesystem::is_directory(dir), ErrorKind::kUsage,
             "--pretrained {}: no such folder; give a folder that transformers' save_pretrained "
             "wrote (config.json, model.safetensors)",
             dir);
  const models::HfGpt2Shape shape = models::read_hf_gpt2_config(dir);
  models::GptOptions options;
  options.vocab_size = shape.vocab_size;
  options.block_size = shape.n_positions;
  options.n_layer = shape.n_layer;
  options.n_head = shape.n_head;
  options.n_embd = shape.n_embd;
  models::Gpt model(options);
  models::load_hf_gpt2(dir, *model, "read from its config.json");
  return model;
}

// --vocab; else the tokenizer files beside --pretrained's weights (vocab.json + merges.txt, as
// save_pretrained writes them); else GPT-2's rank file where `ddpx data download gpt2-vocab`
// puts it, for a model of GPT-2's vocabulary.
text::Vocabulary load_vocabulary(const std::string& vocab, const std::string& pretrained,
                                 const models::GptOptions& model) {
  if (!vocab.empty()) return text::Vocabulary::load(vocab);
  if (!pretrained.empty() && text::is_hf_bpe(pretrained)) return text::Vocabulary::load(pretrained);
  DDPX_CHECK(model.vocab_size >= 50257 && std::filesystem::exists(text::kDefaultGpt2Vocab),
             ErrorKind::kUsage,
             "no --vocab: give the vocab.json that `ddpx data tokenize` wrote beside the "
             "model's training data, or, for GPT-2's vocabulary, the rank file (`ddpx data "
             "download gpt2-vocab` writes {})",
             text::kDefaultGpt2Vocab);
  return text::Vocabulary::load(text::kDefaultGpt2Vocab);
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand(
      "generate",
      "sample text from a language model (a GPT checkpoint, or Hugging Face GPT-2 weights) after "
      "a prompt");
  auto* checkpoint =
      cmd->add_option("--checkpoint", a->checkpoint, "a checkpoint of `ddpx train --model gpt...`");
  auto* pretrained = cmd->add_option(
      "--pretrained", a->pretrained,
      "a folder of GPT-2 weights as transformers' save_pretrained writes it (config.json, "
      "model.safetensors)");
  checkpoint->excludes(pretrained);
  pretrained->excludes(checkpoint);
  cmd->add_option(
      "--vocab", a->vocab,
      std::string("the vocab.json that `ddpx data tokenize` wrote beside the "
                  "training data, GPT-2's tiktoken rank file, or Hugging Face's tokenizer files "
                  "(a folder of vocab.json + merges.txt or tokenizer.json) (default: "
                  "--pretrained's folder when it holds them; else, for a "
                  "model of GPT-2's 50,257 tokens: ") +
          text::kDefaultGpt2Vocab + ", from `ddpx data download gpt2-vocab`)");
  cmd->add_option("--prompt", a->prompt,
                  "the text to continue; empty: GPT-2's <|endoftext|> (a text's start)")
      ->default_str("\\n");  // the newline itself, escaped: printed raw it would break the line
  cmd->add_option("--max_new_tokens", a->sampling.max_new_tokens, "tokens to sample")
      ->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature,
                  "softmax temperature; 0: always the most likely token (greedy)")
      ->capture_default_str();
  cmd->add_option("--top_k", a->sampling.top_k, "sample among the k most likely tokens; 0: all")
      ->capture_default_str();
  cmd->add_option("--seed", a->sampling.seed, "the sampling's random seed")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_flag("--no_cache", a->no_cache,
                "run the whole sequence through the model for every token (slow; a check of the "
                "key/value cache)");
  cmd->add_flag("--tokens", a->tokens,
                "print the token ids (the prompt's and the new ones, one line) instead of text");
  cmd->callback([a, &exit_code] {
    DDPX_CHECK(!a->checkpoint.empty() || !a->pretrained.empty(), ErrorKind::kUsage,
               "give the model: --checkpoint FILE (ddpx train's) or --pretrained DIR "
               "(transformers' save_pretrained folder)");
    DDPX_CHECK(
        a->sampling.max_new_tokens >= 0 && a->sampling.top_k >= 0 && a->sampling.temperature >= 0,
        ErrorKind::kUsage,
        "--max_new_tokens {}, --top_k {}, --temperature {}: expected numbers >= 0",
        a->sampling.max_new_tokens, a->sampling.top_k, a->sampling.temperature);
    models::Gpt model = a->checkpoint.empty() ? load_pretrained_gpt(a->pretrained)
                                              : load_checkpoint_gpt(a->checkpoint);
    model->to(torch::Device(a->device));
    const std::string& model_file = a->checkpoint.empty() ? a->pretrained : a->checkpoint;
    const text::Vocabulary vocab = load_vocabulary(a->vocab, a->pretrained, model->options());
    DDPX_CHECK(vocab.vocab_size() <= model->options().vocab_size, ErrorKind::kUsage,
               "{} has {} tokens but the model {} knows {}; give the vocabulary of the data it "
               "was trained on (--vocab)",
               vocab.path(), vocab.vocab_size(), model_file, model->options().vocab_size);
    std::vector<uint32_t> prompt = vocab.encode(a->prompt, "--prompt");
    if (prompt.empty() && vocab.end_of_text()) prompt.push_back(*vocab.end_of_text());
    a->sampling.use_cache = !a->no_cache;
    const std::vector<int64_t> tokens =
        models::generate(model, std::vector<int64_t>(prompt.begin(), prompt.end()), a->sampling);
    if (a->tokens) {
      std::ostringstream line;
      for (size_t i = 0; i < tokens.size(); ++i) line << (i ? " " : "") << tokens[i];
      log::out("{}", line.str());
    } else {
      DDPX_CHECK(
          tokens.empty() || *std::max_element(tokens.begin(), tokens.end()) < vocab.vocab_size(),
          ErrorKind::kUsage,
          "the model sampled a token past the {} of {}; give the vocabulary of the data "
          "it was trained on (--vocab)",
          vocab.vocab_size(), vocab.path());
      log::out("{}", vocab.decode(std::vector<uint32_t>(tokens.begin(), tokens.end())));
    }
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
