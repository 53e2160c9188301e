#include "cli/model_data_flags.h"

#include "cli/choices.h"

namespace ddpx::cli {

data::DatasetSpec ModelDataOptions::dataset_spec() const {
  data::DatasetSpec spec;
  spec.dataset = dataset;
  spec.data_dir = data_dir;
  spec.synthetic_height = spec.synthetic_width = synthetic_image;
  spec.synthetic_classes = synthetic_classes;
  return spec;
}

int64_t ModelDataOptions::input_size() const {
  return image_size > 0 ? image_size : data::dataset_shape(dataset_spec()).image_size;
}

void add_model_data_flags(CLI::App* cmd, ModelDataOptions& o) {
  cmd->add_option("--model", o.model, "model name (`ddpx models` lists them)");
  add_choice(cmd, "--stem", o.stem, models::kStemNames,
             "ResNet stem: imagenet (7x7/2 + max-pool) or cifar (3x3/1)");
  add_choice(cmd, "--dataset", o.dataset, data::kDatasetNames,
             "fashion-mnist | mnist | cifar10 | cifar100 | synthetic");
  cmd->add_option("--data_dir", o.data_dir,
                  "dataset folder (default: the dataset's own; "
                  "fashion-mnist: Debian's dataset-fashion-mnist)");
  cmd->add_option("--image_size", o.image_size, "resize images to this square (0: native size)");
  cmd->add_option("--synthetic_image", o.synthetic_image, "synthetic: image height = width");
  cmd->add_option("--synthetic_classes", o.synthetic_classes, "synthetic: classes");
}

}  // namespace ddpx::cli
