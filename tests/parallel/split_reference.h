// What the tests of the plans that split a model (tensor_parallel_test.cpp, mesh_3d_test.cpp)
// share: the optimizer both sides train with, random global batches, the loss, a replica's part
// of a batch, and the tolerance they compare by.
#pragma once

#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/plan.h"

namespace ddpx::test {

// SGD with momentum and weight decay: the momenta are state a checkpoint must carry.
inline std::unique_ptr<torch::optim::Optimizer> momentum_sgd(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
}

struct Batches {
  std::vector<torch::Tensor> x, y;  // (batch, 3, 8, 8) images and their labels, a step each
};

inline Batches random_batches(uint64_t seed, int steps, int64_t batch, int64_t classes) {
  Batches b;
  torch::manual_seed(seed);
  for (int s = 0; s < steps; ++s) {
    b.x.push_back(torch::randn({batch, 3, 8, 8}));
    b.y.push_back(torch::randint(classes, {batch}));
  }
  return b;
}

inline torch::Tensor cross_entropy(const torch::Tensor& out, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(out, y);
}

// Step s's rows of `replica` when the global batch is split over `replicas`.
inline parallel::MicroBatch replica_batch(const Batches& b, int s, int replica, int replicas) {
  const int64_t n = b.x[s].size(0) / replicas;
  parallel::MicroBatch mb;
  mb.input = b.x[s].narrow(0, replica * n, n);
  mb.target = b.y[s].narrow(0, replica * n, n);
  mb.loss = cross_entropy;
  return mb;
}

// Within 1e-5 of the largest magnitude of `want` (plus 1e-6): the split matrix products and the
// collectives sum in another order than one process.
inline void expect_close(const torch::Tensor& got, const torch::Tensor& want,
                         const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-5 * scale + 1e-6) << what << ": max |diff| " << diff << " at scale " << scale;
}

// The parameters and SGD momenta of a trained model, by name.
struct Trained {
  std::map<std::string, torch::Tensor> params, momenta;
};

inline Trained trained_state(const torch::nn::AnyModule& model,
                             torch::optim::Optimizer& optimizer) {
  Trained t;
  for (const auto& p : model.ptr()->named_parameters()) {
    t.params[p.key()] = p.value().detach().clone();
    auto& state = static_cast<torch::optim::SGDParamState&>(
        *optimizer.state().at(p.value().unsafeGetTensorImpl()));
    t.momenta[p.key()] = state.momentum_buffer().clone();
  }
  return t;
}

// One process training `model` with momentum_sgd() over b's first `steps` steps: what the plans
// are compared with. Each step calls before(s, model, optimizer) ahead of its forward and
// after(s, model) once its backward is done, before the optimizer steps.
struct SingleProcess {
  torch::Tensor first_logits;
  torch::Tensor eval_logits;  // the trained model's, in evaluation mode, on the first batch
  std::vector<double> losses;
  Trained trained;  // after the steps
};

template <class Before, class After>
SingleProcess train_single_process(torch::nn::AnyModule model, const Batches& b, int steps,
                                   Before before, After after) {
  auto optimizer = momentum_sgd(model.ptr()->parameters());
  SingleProcess r;
  for (int s = 0; s < steps; ++s) {
    before(s, model, *optimizer);
    torch::Tensor logits = model.forward(b.x[s]);
    torch::Tensor loss = cross_entropy(logits, b.y[s]);
    if (s == 0) r.first_logits = logits.detach().clone();
    r.losses.push_back(loss.item<double>());
    loss.backward();
    after(s, model);
    optimizer->step();
    optimizer->zero_grad();
  }
  r.trained = trained_state(model, *optimizer);
  torch::NoGradGuard no_grad;
  model.ptr()->eval();
  r.eval_logits = model.forward(b.x[0]);
  return r;
}

// A plan's state_dict() as the bytes of its two archives: {model, optimizer}.
inline std::vector<std::string> archive_bytes(torch::serialize::OutputArchive& model,
                                              torch::serialize::OutputArchive& optimizer) {
  std::ostringstream m, o;
  model.save_to(m);
  optimizer.save_to(o);
  return {m.str(), o.str()};
}

// The plan's module() (collective: every rank calls it) holds `want`'s parameters, and rank 0
// keeps the plan's state_dict() bytes in `saved` for expect_checkpoint_holds().
template <class Plan>
void expect_trained_and_keep_state(Plan& plan, int rank, const Trained& want,
                                   std::vector<std::string>& saved) {
  for (const auto& p : plan.module().ptr()->named_parameters())
    expect_close(p.value(), want.params.at(p.key()),
                 "rank " + std::to_string(rank) + " " + p.key());
  torch::serialize::OutputArchive m, o;
  plan.state_dict(m, o);
  if (rank == 0) saved = archive_bytes(m, o);
}

// Those bytes load into `model` (unsplit, one process) and a momentum_sgd() over it, and hold
// `want`'s parameters and momenta.
inline void expect_checkpoint_holds(const std::vector<std::string>& saved,
                                    torch::nn::AnyModule model, const Trained& want) {
  ASSERT_EQ(saved.size(), 2u);
  auto optimizer = momentum_sgd(model.ptr()->parameters());
  torch::serialize::InputArchive m, o;
  std::istringstream ms(saved[0]), os(saved[1]);
  m.load_from(ms);
  o.load_from(os);
  model.ptr()->load(m);
  optimizer->load(o);
  const Trained got = trained_state(model, *optimizer);
  for (const auto& [name, value] : want.params) {
    expect_close(got.params.at(name), value, "saved " + name);
    expect_close(got.momenta.at(name), want.momenta.at(name), "saved momentum " + name);
  }
}

}  // namespace ddpx::test
