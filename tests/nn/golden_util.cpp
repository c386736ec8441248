// Golden-case helpers (see golden_util.h).
#include "golden_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace booster::testing {

std::string golden_dir() {
  const char* env = std::getenv("BOOSTER_GOLDEN_DIR");
  return env && *env ? env : BOOSTER_DEFAULT_GOLDEN_DIR;
}

std::vector<std::string> golden_cases() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (!fs::is_directory(golden_dir())) return out;
  for (auto& e : fs::directory_iterator(golden_dir()))
    if (e.is_directory() && fs::exists(e.path() / "config.json")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

void ErrorReport::check(const std::string& kind, const std::string& name, const Tensor& got, const Tensor& want,
                        double tol) {
  if (got.shape() != want.shape() && got.numel() != want.numel()) {
    failures.push_back(name + ": shape " + shape_str(got.shape()) + " vs expected " + shape_str(want.shape()));
    return;
  }
  auto g = got.to_vector(), w = want.to_vector();
  double err = 0;
  for (size_t i = 0; i < g.size(); ++i) err = std::max(err, double(std::abs(g[i] - w[i])));
  if (!(err <= tol)) failures.push_back(name + ": max |diff| " + std::to_string(err) + " > tolerance " + std::to_string(tol));
  Worst& wk = worst_[kind];
  if (err / tol >= wk.err / std::max(wk.tol, 1e-30) || wk.name.empty()) wk = {err, tol, name};
}

bool ErrorReport::print(const std::string& case_name) const {
  for (auto& [kind, w] : worst_)
    std::printf("  %-12s worst %.3e (tolerance %.1e) at %s\n", kind.c_str(), w.err, w.tol, w.name.c_str());
  for (auto& f : failures) std::printf("  FAIL %s\n", f.c_str());
  std::printf("%s %s\n", failures.empty() ? "PASS" : "FAIL", case_name.c_str());
  return failures.empty();
}

}  // namespace booster::testing
