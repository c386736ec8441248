// Shared by the golden parity tests: case discovery and per-kind error bookkeeping.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace booster::testing {

/// BOOSTER_GOLDEN_DIR from the environment, else the compiled-in default.
std::string golden_dir();
/// Case folders (those holding a config.json) under the golden dir, sorted.
std::vector<std::string> golden_cases();

/// Tracks the worst error per tensor kind ("logits", "grad", ...) and whether all passed.
class ErrorReport {
 public:
  /// Compares got against want with |d| <= tol; records the worst ratio for `kind`.
  void check(const std::string& kind, const std::string& name, const Tensor& got, const Tensor& want, double tol);
  /// Prints one line per kind and returns true when every check passed.
  bool print(const std::string& case_name) const;
  std::vector<std::string> failures;

 private:
  struct Worst {
    double err = 0, tol = 0;
    std::string name;
  };
  std::map<std::string, Worst> worst_;
};

}  // namespace booster::testing
