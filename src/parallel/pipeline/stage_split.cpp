// balance_stages(): the linear partition problem, by dynamic programming (see stage_split.h).
#include "parallel/pipeline/stage_split.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace ddpx::parallel {

std::vector<size_t> balance_stages(const std::vector<double>& costs, int stages,
                                   const std::string& model_name) {
  const size_t n = costs.size();
  const auto k = static_cast<size_t>(stages);
  DDPX_CHECK(stages >= 1 && n >= k, ErrorKind::kUsage,
             "{} has {} layers a pipeline can cut between, fewer than the {} stages asked for; "
             "lower --pipeline_parallel (or --stages_per_rank)",
             model_name, n, stages);
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[j][i]: the smallest largest-stage cost of the first i layers in j stages.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> cut(k + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t j = 1; j <= k; ++j) {
    for (size_t i = j; i <= n; ++i) {
      for (size_t c = j - 1; c < i; ++c) {
        const double worst = std::max(best[j - 1][c], prefix[i] - prefix[c]);
        // Ties go to the later cut, so earlier stages (which hold more activations under 1F1B)
        // take no more than they must.
        if (worst <= best[j][i]) {
          best[j][i] = worst;
          cut[j][i] = c;
        }
      }
    }
  }
  std::vector<size_t> bounds(k + 1);
  bounds[k] = n;
  for (size_t j = k, i = n; j > 0; --j) {
    i = cut[j][i];
    bounds[j - 1] = i;
  }
  return bounds;
}

}  // namespace ddpx::parallel
