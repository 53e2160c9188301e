// The memory a GPT's tied output layer and its logits take on each tensor-parallel rank, with
// the vocabulary-parallel loss (src/parallel/tensor/vocab_parallel.h), at T = 1, 2 and 4: T
// threads of this process are the ranks of a real Gloo group on 127.0.0.1, each counting the CPU
// tensor bytes its thread allocates (parallel/planner/tensor_bytes.h). Each rank holds the final
// LayerNorm's output x (B, S, C), whole, and the labels before the count starts; counted: its
// rows of the embedding (V'/T x C), the local logits, the loss's forward and backward (the
// gradients of x and of the rows included). Prints one line a T: the peak of any rank, in MiB.
//
// Usage: vocab_parallel_memory [BATCH [SEQ [VOCAB [WIDTH]]]]   (default: gpt2, 8 x 1024 tokens)
#include <torch/nn/functional/linear.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "distributed/context.h"
#include "parallel/planner/tensor_bytes.h"
#include "parallel/tensor/vocab_parallel.h"

using namespace ddpx;

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t fallback) { return argc > i ? std::atoll(argv[i]) : fallback; };
  const int64_t batch = arg(1, 8), seq = arg(2, 1024), vocab = arg(3, 50257), width = arg(4, 768);
  torch::set_num_threads(1);
  parallel::CpuTensorBytes bytes;
  std::printf(
      "output layer + logits + loss, forward and backward, per rank: batch %lld x %lld "
      "tokens, vocabulary %lld, width %lld\n",
      static_cast<long long>(batch), static_cast<long long>(seq), static_cast<long long>(vocab),
      static_cast<long long>(width));
  int port = 29700 + static_cast<int>(std::rand() % 200);
  for (const int ranks : {1, 2, 4}) {
    std::vector<int64_t> peaks(ranks);
    std::vector<std::thread> threads;
    const int this_port = port++;
    for (int rank = 0; rank < ranks; ++rank) {
      threads.emplace_back([&, rank] {
        parallel::CpuTensorBytes::tag_thread(rank);
        dist::WorldInfo w;
        w.rank = w.local_rank = rank;
        w.world_size = w.local_world_size = ranks;
        w.master_addr = "127.0.0.1";
        w.master_port = this_port;
        w.source = "bench";
        dist::InitOptions options;
        options.device = dist::DeviceChoice::kCpu;
        options.backend = dist::BackendChoice::kGloo;
        options.transport = dist::Transport::kGloo;
        auto group = dist::init(w, options);
        const int64_t rows = parallel::tensor::padded_vocab(vocab, ranks) / ranks;
        torch::Tensor x = torch::randn({batch, seq, width}).requires_grad_(true);
        torch::Tensor labels = torch::randint(vocab, {batch, seq}, torch::kLong);
        group->barrier();
        if (rank == 0) bytes.reset_peak();
        group->barrier();
        const int64_t before = bytes.tag_current(rank);
        {
          torch::Tensor piece = (torch::randn({rows, width}) * 0.02).requires_grad_(true);
          torch::Tensor logits = torch::nn::functional::linear(x, piece);
          torch::Tensor loss = parallel::tensor::vocab_parallel_cross_entropy(
              logits, labels, rank * rows, vocab, 0.0, *group);
          loss.backward();
        }
        peaks[rank] = bytes.tag_peak(rank) - before;
        group->barrier();
      });
    }
    for (auto& t : threads) t.join();
    const int64_t peak = *std::max_element(peaks.begin(), peaks.end());
    std::printf("T=%d: %.1f MiB a rank (logits %.1f MiB)\n", ranks,
                static_cast<double>(peak) / (1 << 20),
                static_cast<double>(batch * seq * parallel::tensor::padded_vocab(vocab, ranks) /
                                    ranks * 4) /
                    (1 << 20));
  }
  return 0;
}
