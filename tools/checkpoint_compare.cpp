// checkpoint_compare: compares two checkpoints tensor by tensor; exits 0 when every tensor
// matches within --atol (0: bit-identical; --atol-for SUFFIX=TOL for the tensors whose name
// ends so), else prints the differences and exits 1.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

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
  std::vector<std::string> atol_for;
  app.add_option("--atol-for", atol_for, "SUFFIX=TOL: the allowed difference for tensors whose name ends with SUFFIX");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::pair<std::string, double>> tolerances;
  for (const auto& spec : atol_for) {
    const auto eq = spec.rfind('=');
    char* end = nullptr;
    const double tol = eq == std::string::npos ? 0 : std::strtod(spec.c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq == 0 || end == spec.c_str() + eq + 1 || *end != '\0') {
      std::fprintf(stderr, "checkpoint_compare: --atol-for wants SUFFIX=TOL, got '%s'\n", spec.c_str());
      return 2;
    }
    tolerances.emplace_back(spec.substr(0, eq), tol);
  }
  auto tolerance_of = [&](const std::string& name) {
    for (const auto& [suffix, tol] : tolerances)
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return tol;
    return atol;
  };
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
      if (d > tolerance_of(name)) {
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
