// The tiny ViT, batches and optimizer the plugin suites share (conformance, TorchDDP).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "booster/booster.h"
#include "core/dist/runtime.h"
#include "core/tensor/random.h"
#include "nn/vit.h"
#include "optim/sgd.h"

namespace booster::plugin_tests {

inline nn::ViTConfig tiny_config() {
  nn::ViTConfig c;
  c.hidden_size = 32, c.num_hidden_layers = 4, c.num_attention_heads = 4, c.intermediate_size = 64;
  c.image_size = 16, c.patch_size = 8, c.num_labels = 3;
  return c;
}

inline std::shared_ptr<nn::ViTForImageClassification> fresh_model(uint64_t seed = 42) {
  manual_seed(seed);
  return std::make_shared<nn::ViTForImageClassification>(tiny_config());
}

// The global batch of a step: `rows` samples, identical on every rank.
inline std::pair<Tensor, Tensor> global_batch(int step, int64_t rows) {
  Tensor x = Tensor::empty({rows, 3, 16, 16});
  Generator(1000 + uint64_t(step)).normal_(x);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < rows; ++i) y.push_back((i * 7 + step) % 3);
  return {x, Tensor::from_ints(y, {rows})};
}

// Rows [dp_rank * b, (dp_rank + 1) * b) of a batch (a data-parallel replica's ranks, tp
// consecutive ones, see the same rows).
/// The data-parallel replica whose rows this rank sees: the plugin's dp_rank() (a layout may
/// put its pipeline stages outermost, as Galvatron's does), else world rank / tp.
inline int replica_index(int tp = 1, const Booster* booster = nullptr) {
  return booster && booster->plugin() ? booster->plugin()->dp_rank() : dist::world_rank() / tp;
}

inline std::pair<Tensor, Tensor> my_slice(const std::pair<Tensor, Tensor>& batch, int64_t b, int part = 0, int parts = 1,
                                   int tp = 1, const Booster* booster = nullptr) {
  const int64_t start = (int64_t(replica_index(tp, booster)) * parts + part) * b;
  return {batch.first.narrow(0, start, b).contiguous(), batch.second.narrow(0, start, b).contiguous()};
}

inline optim::SGDOptions sgd() { return {0.05, 0.9}; }

inline int n_ranks() { return dist::world_size(); }

// A file of this process in the temp folder ("<stem>_rank<r>_<pid>.json"), holding `text`:
// its own, so that test programs running at once (ctest -j) never read each other's half-written copy.
inline std::string write_process_file(const std::string& stem, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    (stem + "_rank" + std::to_string(dist::world_rank()) + "_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace booster::plugin_tests
