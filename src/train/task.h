// What a run learns to predict: a class per image, or the next token at every position of a
// window (a language model). The loop, the plans, the loss and the metrics are the same for
// both (the loss and the accuracy take the class dimension last and count every prediction);
// this is the one place where they differ: what is counted and how the lines name it.
#pragma once

#include <string>

#include "data/dataset.h"

namespace ddpx::train {

struct Task {
  bool next_token = false;      // a language model: val loss and perplexity are printed too
  bool masked_lm = false;       // BERT's: the loss and accuracy are over the masked tokens
  std::string unit = "images";  // what a prediction is made for: "images" or "tokens"
};

inline Task task_of(const data::Dataset& train) {
  if (train.tokens.defined()) return {true, train.masked_lm != nullptr, "tokens"};
  return {};
}

}  // namespace ddpx::train
