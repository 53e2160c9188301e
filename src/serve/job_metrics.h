// A job's per-epoch metrics, read from rank 0's log: the seed's lines that `ddpx train` prints
// (`Epoch - E/N: time - Ts || loss_train - L || accuracy_train - A || images_per_sec - R`, then
// `Accuracy on test dataset - X`; a BERT's `mlm_loss_train` is its loss_train). Any command's log
// works; one without such lines has none.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ddpx::serve {

// [{"epoch", "epochs", "time_s", "loss_train", "accuracy_train", "images_per_sec",
//   "accuracy_test" (when printed)}], in order.
nlohmann::json epoch_metrics(const std::string& log);

}  // namespace ddpx::serve
