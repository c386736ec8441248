// Parity with PyTorch on every golden case under BOOSTER_GOLDEN_DIR: logits, loss and the
// gradient of every parameter, with the tolerances of shared/golden/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "golden_util.h"
#include "nn/pretrained.h"
#include "nn/safetensors.h"

using namespace booster;
using namespace booster::nn;
using namespace booster::testing;
namespace fs = std::filesystem;

namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, double(std::abs(v)));
  return m;
}

// The gradient of an attention key bias is exactly zero; the reference holds noise there.
bool is_key_bias(const std::string& name) {
  return name.size() > 14 && name.compare(name.size() - 14, 14, "attention.key.bias") == 0;
}

}  // namespace

TEST(GoldenParity, ForwardAndGradients) {
  auto cases = golden_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases (folders with config.json) under " << golden_dir();
  int failed = 0;
  for (const auto& dir : cases) {
    const std::string name = fs::path(dir).filename().string();
    auto model = vit_from_pretrained(dir);
    model->eval();  // dropout off, as the reference ran
    SafetensorsFile input = load_safetensors((fs::path(dir) / "input.safetensors").string());
    SafetensorsFile expected = load_safetensors((fs::path(dir) / "expected.safetensors").string());
    auto out = (*model)(input.at("pixel_values"), input.at("labels"));
    out.loss.backward();

    ErrorReport report;
    report.check("logits", "logits", out.logits, expected.at("logits"), 1e-4);
    report.check("loss", "loss", out.loss.reshape({1}), expected.at("loss"), 1e-4);
    for (auto& [pname, p] : model->named_parameters()) {
      const std::string key = "grad." + pname;
      if (!expected.contains(key)) {
        report.failures.push_back(key + ": not in expected.safetensors");
        continue;
      }
      Tensor want = expected.at(key);
      if (!p.grad().defined()) {
        report.failures.push_back(pname + ": no gradient");
        continue;
      }
      const double tol = is_key_bias(pname) ? 1e-5 : 1e-5 + 1e-3 * max_abs(want);
      report.check("grad", key, p.grad(), want, tol);
    }
    if (!report.print(name)) ++failed;
  }
  EXPECT_EQ(failed, 0) << failed << " of " << cases.size() << " golden cases failed";
}
