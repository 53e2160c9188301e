// `ddpx data`: fetch the official dataset files (download), check what a folder holds (info:
// a known dataset's sizes and statistics, or an image folder's classes, formats and bad files),
// write an image folder as tar shards (pack) and turn text into token files (tokenize).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>

#include "cli/choices.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/download.h"
#include "data/image_dataset.h"
#include "data/image_folder_info.h"
#include "data/shard_pack.h"
#include "text/tokenize.h"

namespace ddpx::cli {

void add_data_command(CLI::App& app, int& exit_code) {
  auto* data = app.add_subcommand("data", "Download and inspect datasets");
  data->require_subcommand(1);

  struct Args {
    std::string name;
    data::DatasetId dataset = data::DatasetId::kFashionMnist;
    std::string data_dir;
    std::string mirror;
    std::string checksums;
  };
  auto args = std::make_shared<Args>();

  auto* download = data->add_subcommand(
      "download", "Fetch a dataset's official files, check their MD5 and unpack them");
  download
      ->add_option(
          "name", args->name,
          "mnist, fashion-mnist, cifar10, cifar100, tinyshakespeare or gpt2-vocab (GPT-2's "
          "tiktoken rank file)")
      ->required();
  download->add_option("--data_dir", args->data_dir, "Destination folder (default: ./data/NAME)");
  download->add_option("--mirror", args->mirror,
                       "Base URL replacing the official one (also env DDPX_DATA_MIRROR)");
  download->add_option("--checksums", args->checksums,
                       "md5sum-format file (MD5  FILE per line) replacing the official MD5s, for "
                       "a mirror that serves other copies of the files");
  download->callback([args, &exit_code] {
    data::DownloadOptions options;
    options.data_dir = args->data_dir;
    options.mirror = args->mirror;
    options.checksums = args->checksums;
    options.progress = true;
    std::string dir = data::download_dataset(args->name, options);
    log::out("{} is ready in {}", args->name, dir);
    exit_code = 0;
  });

  auto* info = data->add_subcommand(
      "info",
      "Print a dataset's sizes and statistics, or an image folder's classes, formats, "
      "sizes and unreadable files");
  info->add_option("name", args->name,
                   "mnist, fashion-mnist, cifar10, cifar100, synthetic, imagefolder, imagenet, or "
                   "the path of an image folder (DIR/<class>/*.jpg)")
      ->required();
  info->add_option("--data_dir", args->data_dir,
                   "Folder holding the files (default: data/NAME; CIFAR: also data itself, "
                   "the original's layout; fashion-mnist: /usr/share/datasets/fashion-mnist "
                   "when installed)");
  info->callback([args, &exit_code] {
    const auto dataset = parse_name(data::kDatasetNames, args->name);
    const bool folder = !dataset && std::filesystem::is_directory(args->name);
    DDPX_CHECK(dataset || folder, ErrorKind::kUsage,
               "data info {}: neither a dataset ({}) nor a folder", args->name,
               list_names(data::kDatasetNames));
    if (folder || *dataset == data::DatasetId::kImageFolder ||
        *dataset == data::DatasetId::kImagenet) {
      data::DatasetSpec spec;
      spec.dataset = dataset.value_or(data::DatasetId::kImageFolder);
      const std::string dir = folder                   ? args->name
                              : args->data_dir.empty() ? data::default_data_dir(spec.dataset)
                                                       : args->data_dir;
      std::vector<std::string> roots{data::image_train_root(spec, dir)};
      if (spec.dataset == data::DatasetId::kImagenet) roots.push_back(dir + "/val");
      for (const auto& root : roots)
        for (const auto& line : data::describe_image_folder(data::index_image_folder(root)))
          log::out("{}", line);
      exit_code = 0;
      return;
    }
    data::DatasetSpec spec;
    spec.dataset = *dataset;
    spec.data_dir = args->data_dir;
    data::DatasetSplits splits = data::load_dataset(spec);
    const auto& t = splits.train;
    log::out("{}: train {} test {} images of {}x{}x{}, {} classes, from {}", data::name(*dataset),
             t.size(), splits.test.size(), t.height(), t.width(), t.channels(), t.num_classes,
             splits.source);
    log::out("mean {} std {}", fmt::join(splits.mean, " "), fmt::join(splits.std, " "));
    exit_code = 0;
  });

  auto pack_opts = std::make_shared<data::PackOptions>();
  auto shard_size = std::make_shared<std::string>("1G");
  auto* pack = data->add_subcommand(
      "pack", "Write an image folder as tar shards (WebDataset's layout) for --dataset shards");
  pack->add_option("folder", pack_opts->folder, "The image folder (DIR/<class>/*.jpg)")->required();
  pack->add_option("--out", pack_opts->out_dir, "Folder for PREFIX-000000.tar, ... and classes.txt")
      ->required();
  pack->add_option("--shard_size", *shard_size,
                   "Largest shard: bytes, or with K, M or G (one sample a shard at least)")
      ->capture_default_str();
  pack->add_option("--prefix", pack_opts->prefix,
                   "Shard names' prefix: train, or val for a validation folder (labelled by "
                   "OUT/classes.txt's names)")
      ->capture_default_str();
  pack->add_option("--seed", pack_opts->seed, "Seed of the one shuffle of the samples")
      ->capture_default_str();
  pack->callback([pack_opts, shard_size, &exit_code] {
    pack_opts->shard_bytes = data::parse_byte_size(*shard_size, "--shard_size");
    const data::PackResult r = data::pack_image_folder(*pack_opts);
    log::out("packed {} images of {} classes from {} into {} shard(s), {:.1f} MiB, in {}",
             r.samples, r.classes, pack_opts->folder, r.shards.size(), r.bytes / 1048576.0,
             pack_opts->out_dir);
    log::out("train on them with `ddpx train --dataset shards --data_dir {}`", pack_opts->out_dir);
    exit_code = 0;
  });

  auto opts = std::make_shared<text::TokenizeOptions>();
  auto* tokenize = data->add_subcommand(
      "tokenize",
      "Turn text files into train.bin and val.bin (llm.c's token files) and vocab.json");
  tokenize->add_option("files", opts->inputs, "Text files (UTF-8), one document each")->required();
  add_choice(tokenize, "--tokenizer", opts->tokenizer, text::kTokenizerNames,
             "gpt2: GPT-2's byte-level BPE (tiktoken's); char: nanoGPT's characters; wordpiece: "
             "BERT's WordPiece over --vocab vocab.txt, each file [CLS] ... [SEP]");
  tokenize->add_option(
      "--vocab", opts->vocab,
      fmt::format(
          "gpt2: the tiktoken rank file, or Hugging Face's tokenizer files (a "
          "folder of vocab.json + merges.txt or tokenizer.json) (default: {}, from `ddpx data "
          "download gpt2-vocab`); char: a vocab.json to reuse (default: "
          "the characters of FILES); wordpiece: BERT's vocab.txt "
          "(required)",
          text::kDefaultGpt2Vocab));
  tokenize->add_option("--out", opts->out_dir, "Folder for train.bin, val.bin and vocab.json")
      ->required();
  tokenize
      ->add_option("--val_fraction", opts->val_fraction,
                   "The share of the tokens, from the end, that goes to val.bin")
      ->capture_default_str();
  tokenize->add_option("--threads", opts->threads, "Tokenizing threads (0: one per core)")
      ->capture_default_str();
  tokenize->add_flag("--cased", opts->cased,
                     "wordpiece: a cased vocabulary (bert-base-cased): keep case and accents "
                     "(default: lower-case and strip accents, as bert-base-uncased)");
  tokenize->add_flag("--allow_invalid_utf8", opts->allow_invalid_utf8,
                     "gpt2: tokenize bytes that are not UTF-8 as byte tokens instead of refusing "
                     "the file");
  tokenize->callback([opts, &exit_code] {
    text::TokenizeResult r = text::tokenize_files(*opts);
    log::out(
        "tokenized {} file(s), {} bytes, into {} train and {} val tokens ({}, vocabulary {}) "
        "in {:.3f} s on {} thread(s): {:.2f} MB/s",
        opts->inputs.size(), r.input_bytes, r.train_tokens, r.val_tokens,
        text::name(opts->tokenizer), r.vocab_size, r.tokenize_seconds, r.threads,
        r.tokenize_seconds > 0 ? r.input_bytes / r.tokenize_seconds / 1e6 : 0.0);
    log::out("wrote {}", fmt::join(r.written, ", "));
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
