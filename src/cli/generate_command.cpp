// `ddpx generate --checkpoint C --vocab DIR/vocab.json --prompt TEXT`: text sampled from a
// trained GPT, through the key/value cache, decoded with the character vocabulary that
// `ddpx data tokenize --tokenizer char` wrote beside the token files: a human's check of what
// the model learned.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "models/gpt_generate.h"
#include "models/zoo/registry.h"
#include "text/char_tokenizer.h"
#include "train/checkpoint.h"

namespace ddpx::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint, vocab, prompt = "\n", device = "cpu";
  models::SamplingOptions sampling;
  bool no_cache = false;
};

// The checkpoint's model, which must be a GPT, with its weights, on `device`.
models::Gpt load_gpt(const std::string& checkpoint, const torch::Device& device) {
  const train::CheckpointMeta meta = train::read_checkpoint_meta(checkpoint);
  const models::ModelInfo& info = models::find_model(meta.model);
  DDPX_CHECK(info.family == "gpt", ErrorKind::kUsage,
             "{} holds a {} ({}), not a language model; generate takes the checkpoint of a GPT "
             "(ddpx train --model gpt-nano --dataset tokens ...)",
             checkpoint, meta.model, info.family);
  models::ModelConfig config;
  config.num_classes = meta.num_classes;
  torch::nn::AnyModule any = models::create_model(meta.model, config);
  train::load_checkpoint_weights(checkpoint, *any.ptr());
  auto gpt = std::dynamic_pointer_cast<models::GptImpl>(any.ptr());
  DDPX_CHECK(gpt != nullptr, ErrorKind::kInternal, "model {} of family gpt is no GptImpl",
             meta.model);
  gpt->to(device);
  return models::Gpt(gpt);
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand(
      "generate", "sample text from a trained language model (a GPT checkpoint) after a prompt");
  cmd->add_option("--checkpoint", a->checkpoint, "a checkpoint of `ddpx train --model gpt...`")
      ->required();
  cmd->add_option("--vocab", a->vocab,
                  "the vocab.json that `ddpx data tokenize --tokenizer char` wrote beside the "
                  "training data")
      ->required();
  cmd->add_option("--prompt", a->prompt, "the text to continue")->capture_default_str();
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
  cmd->callback([a, &exit_code] {
    DDPX_CHECK(
        a->sampling.max_new_tokens >= 0 && a->sampling.top_k >= 0 && a->sampling.temperature >= 0,
        ErrorKind::kUsage,
        "--max_new_tokens {}, --top_k {}, --temperature {}: expected numbers >= 0",
        a->sampling.max_new_tokens, a->sampling.top_k, a->sampling.temperature);
    const text::CharTokenizer vocab = text::CharTokenizer::load(a->vocab);
    models::Gpt model = load_gpt(a->checkpoint, torch::Device(a->device));
    DDPX_CHECK(vocab.vocab_size() <= model->options().vocab_size, ErrorKind::kUsage,
               "{} has {} characters but the model {} knows {} tokens; give the vocab.json of the "
               "data it was trained on",
               a->vocab, vocab.vocab_size(), a->checkpoint, model->options().vocab_size);
    std::vector<uint32_t> prompt;
    vocab.encode(a->prompt, 0, a->prompt.size(), "--prompt", prompt);
    a->sampling.use_cache = !a->no_cache;
    const std::vector<int64_t> tokens =
        models::generate(model, std::vector<int64_t>(prompt.begin(), prompt.end()), a->sampling);
    std::vector<uint32_t> out;
    for (int64_t t : tokens) {
      DDPX_CHECK(t < vocab.vocab_size(), ErrorKind::kUsage,
                 "the model sampled token {}, past the {} characters of {}; give the vocab.json "
                 "of the data it was trained on",
                 t, vocab.vocab_size(), a->vocab);
      out.push_back(static_cast<uint32_t>(t));
    }
    log::out("{}", vocab.decode(out));
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
