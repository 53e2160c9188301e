// The seed's `--show_recommendations` and `--script_options` texts, read from the model table.
#pragma once

namespace ddpx::cli {

void print_recommendations();
void print_script_options();

}  // namespace ddpx::cli
