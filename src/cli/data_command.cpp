// `ddpx data`: fetch the official dataset files (download) and check what a folder holds (info:
// a known dataset's sizes and statistics, or an image folder's classes, formats and bad files).
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
  download->add_option("name", args->name, "mnist, fashion-mnist, cifar10 or cifar100")->required();
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
}

}  // namespace ddpx::cli
