#include "cli/recommendations.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/table.h"
#include "models/zoo/registry.h"
#include "train/recipes.h"

namespace ddpx::cli {

void print_recommendations() {
  fmt::print("Recommended settings per model (from `ddpx models`):\n");
  std::vector<std::vector<std::string>> table = {
      {"model", "optimizer", "lr", "batch", "wd", "normalize", "note"}};
  for (const auto& m : models::model_table()) {
    const auto& r = m.recommendation;
    table.push_back({m.name, r.optimizer, fmt::format("{:g}", r.learning_rate),
                     std::to_string(r.batch_size), fmt::format("{:g}", r.weight_decay), r.normalize,
                     r.note});
  }
  for (const std::string& line :
       align_columns(table, {false, true, true, true, true, false, false}))
    fmt::print("{}\n", line);
  fmt::print(
      "\nRecipes (`ddpx train --recipe NAME`; flags given beside it win; "
      "docs/recipes.md):\n");
  for (const auto& recipe : train::recipes()) {
    fmt::print("  {}: {}\n", recipe.name, recipe.summary);
    fmt::print("    ddpx run {} -- train {}\n", recipe.workers, train::recipe_command(recipe));
    fmt::print("    result: {}\n", recipe.result);
  }
  std::fflush(stdout);
}

void print_script_options() {
  fmt::print(
      "Example commands:\n"
      "  # quick test on one process (Fashion-MNIST ships with Debian)\n"
      "  ddpx train --model resnet18 --dataset fashion-mnist --num_epochs 1\n"
      "  # two local workers, the seed's way (its workload: CIFAR-100 from ./data at the model's\n"
      "  # input size, 224x224 here; download once) and ddpx's way (Fashion-MNIST at 28x28)\n"
      "  ddpx data download cifar100 --data_dir data\n"
      "  ./run-ddp.sh 2 script_single_node \"--model resnet18 --learning_rate 0.05 --batch_size "
      "128 --num_epochs 2\"\n"
      "  ddpx run 2 -- train --model resnet18 --dataset fashion-mnist --num_epochs 2\n"
      "  # CIFAR-10 at 224x224 like the seed (download once)\n"
      "  ddpx data download cifar10 --data_dir data\n"
      "  ddpx run 2 -- train --model resnet101 --dataset cifar10 --data_dir data --image_size 224 "
      "--learning_rate 0.002 --optimizer sgd --batch_size 1024 --normalize neg_one_one "
      "--num_epochs 10\n"
      "  # two nodes (the same command on each; node ranks are assigned at rendezvous)\n"
      "  ddpx run 8 --nnodes 2 --master_addr 192.168.1.100 --master_port 29500 -- "
      "train --model resnet50 --dataset cifar10\n"
      "  # checkpoints and resume\n"
      "  ddpx train --save_dir checkpoints --resume auto --num_epochs 10\n");
  std::fflush(stdout);
}

}  // namespace ddpx::cli
