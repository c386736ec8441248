// checkpoint_compare: compares two checkpoints tensor by tensor; exits 0 when every tensor
// matches within --atol (0: bit-identical), else prints the differences and exits 1.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <map>

#include "booster/checkpoint/tensor_store.h"

using namespace booster;

int main(int argc, char** argv) {
  CLI::App app{"Compare two booster-cpp checkpoints"};
  std::string a, b, kind = "model";
  double atol = 0;
  app.add_option("a", a)->required();
  app.add_option("b", b)->required();
  app.add_option("--kind", kind, "model or optimizer");
  app.add_option("--atol", atol, "allowed absolute difference");
  CLI11_PARSE(app, argc, argv);
  try {
    auto la = ckpt::load_tensors(a, kind), lb = ckpt::load_tensors(b, kind);
    std::map<std::string, Tensor> mb(lb.tensors.begin(), lb.tensors.end());
    int bad = 0;
    double worst = 0;
    for (auto& [name, t] : la.tensors) {
      auto it = mb.find(name);
      if (it == mb.end() || it->second.shape() != t.shape()) {
        std::printf("%s: missing or different shape in %s\n", name.c_str(), b.c_str());
        ++bad;
        continue;
      }
      auto x = t.to_vector(), y = it->second.to_vector();
      double d = 0;
      for (size_t i = 0; i < x.size(); ++i) d = std::max(d, double(std::abs(x[i] - y[i])));
      worst = std::max(worst, d);
      if (d > atol) {
        std::printf("%s: max |diff| %.3e\n", name.c_str(), d);
        ++bad;
      }
      mb.erase(it);
    }
    for (auto& [name, t] : mb) std::printf("%s: only in %s\n", name.c_str(), b.c_str()), ++bad;
    std::printf("%s: %zu tensors compared, %d differ (largest |diff| %.3e, atol %.3e)\n",
                bad ? "DIFFERENT" : worst == 0 ? "IDENTICAL" : "EQUAL WITHIN ATOL", la.tensors.size(), bad, worst, atol);
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_compare: %s\n", e.what());
    return 2;
  }
}
