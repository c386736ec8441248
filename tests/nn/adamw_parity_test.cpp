// AdamW against PyTorch where rounding shows: the shared ViT golden cases and a case of our
// own with mostly near-zero gradients (tests/optim/golden, made by tools/make_adamw_golden.py
// with torch 1.13), where Adam turns rounding noise into steps of ~lr. The fused update must
// be no further from PyTorch than the update before it was fused (93148bb's loop, compiled
// here as it was there: contraction on); both figures are printed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/parallel.h"
#include "golden_util.h"
#include "nn/pretrained.h"
#include "nn/safetensors.h"
#include "optim/adam.h"

using namespace booster;
using namespace booster::nn;
namespace fs = std::filesystem;

namespace {

// The Adam update of the build before the fused one (its loop, as written then).
class PreFusedAdamW : public optim::AdamBase {
 public:
  PreFusedAdamW(std::vector<optim::ParamGroup> groups, const optim::AdamOptions& o)
      : AdamBase("AdamW", std::move(groups), o, true) {}

 protected:
  bool fuses_io() const override { return false; }
  void update(const std::string&, Tensor& p, const Tensor& g, optim::ParamState& st, const optim::ParamGroup& group,
              const Tensor&) override {
    Tensor& m = st.buffers["exp_avg"];
    Tensor& v = st.buffers["exp_avg_sq"];
    if (!m.defined()) m = Tensor::zeros(p.shape());
    if (!v.defined()) v = Tensor::zeros(p.shape());
    const double lr = group.get("lr"), b1 = group.get("beta1"), b2 = group.get("beta2"), eps = group.get("eps");
    const double wd = group.get("weight_decay");
    const double bc1 = 1 - std::pow(b1, double(st.step)), bc2_sqrt = std::sqrt(1 - std::pow(b2, double(st.step)));
    const float step_size = float(lr / bc1), f_b1 = float(b1), f_b2 = float(b2), f_1mb1 = float(1 - b1),
                f_1mb2 = float(1 - b2), f_eps = float(eps), f_bc2 = float(bc2_sqrt), decay = float(1 - lr * wd),
                inv_div = float(1.0 / grad_divisor_);
    const bool dec = wd != 0;
    float *pp = p.data<float>(), *pm = m.data<float>(), *pv = v.data<float>();
    const float* pg = g.data<float>();
    parallel_for(p.numel(), 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        const float gi = pg[i] * inv_div;
        const float mi = pm[i] * f_b1 + f_1mb1 * gi;
        const float vi = pv[i] * f_b2 + f_1mb2 * gi * gi;
        pm[i] = mi;
        pv[i] = vi;
        const float pi = dec ? pp[i] * decay : pp[i];
        pp[i] = pi - step_size * (mi / (std::sqrt(vi) / f_bc2 + f_eps));
      }
    });
  }
};

bool is_key_bias(const std::string& name) {
  static const std::string suffix = "attention.key.bias";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// max |got - want| over the named tensors, key biases left out (their gradients are noise).
double worst(const optim::NamedParams& got, const std::function<Tensor(const std::string&)>& want) {
  double w = 0;
  for (auto& [n, p] : got) {
    if (is_key_bias(n)) continue;
    auto a = p.to_vector(), b = want(n).to_vector();
    EXPECT_EQ(a.size(), b.size()) << n;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) w = std::max(w, double(std::abs(a[i] - b[i])));
  }
  return w;
}

struct Figures {
  double fused = 0, pre_fused = 0;
};

// The near-zero case: its parameters, per-step gradients and PyTorch's result after them.
template <typename Opt>
double near_zero_case(const SafetensorsFile& f) {
  const auto decay = nlohmann::json::parse(f.metadata.at("weight_decay"));
  optim::AdamOptions o;
  o.lr = std::stod(f.metadata.at("lr")), o.beta1 = std::stod(f.metadata.at("beta1"));
  o.beta2 = std::stod(f.metadata.at("beta2")), o.eps = std::stod(f.metadata.at("eps"));
  std::vector<optim::ParamGroup> groups;
  optim::NamedParams all;
  for (auto& [name, wd] : decay.items()) {
    Tensor p = f.at("param." + name).clone().requires_grad_();
    groups.push_back({{{name, p}}, {{"weight_decay", double(wd)}}});
    all.push_back({name, p});
  }
  Opt opt(groups, o);
  for (int s = 0; s < std::stoi(f.metadata.at("steps")); ++s) {
    for (auto& [name, p] : all) p.set_grad(f.at("grad." + std::to_string(s) + "." + name).clone());
    opt.step();
  }
  return worst(all, [&](const std::string& n) { return f.at("after_adamw." + n); });
}

// A shared ViT case: `steps` AdamW steps on its batch with training.json's hyperparameters.
template <typename Opt>
double vit_case(const std::string& dir) {
  std::ifstream tf(fs::path(dir) / "training.json");
  const auto tj = nlohmann::json::parse(tf), aj = tj.at("adamw");
  optim::AdamOptions o;
  o.lr = aj.at("lr"), o.beta1 = aj.at("betas")[0], o.beta2 = aj.at("betas")[1], o.eps = aj.at("eps");
  o.weight_decay = aj.at("weight_decay");
  auto model = vit_from_pretrained(dir);
  model->eval();
  SafetensorsFile input = load_safetensors((fs::path(dir) / "input.safetensors").string());
  SafetensorsFile expected = load_safetensors((fs::path(dir) / "expected.safetensors").string());
  Opt opt(std::vector<optim::ParamGroup>{{model->named_parameters(), {}}}, o);
  for (int i = 0; i < tj.at("steps").get<int>(); ++i) {
    opt.zero_grad();
    (*model)(input.at("pixel_values"), input.at("labels")).loss.backward();
    opt.step();
  }
  return worst(model->named_parameters(), [&](const std::string& n) { return expected.at("after_adamw." + n); });
}

void report(const std::string& name, const Figures& f) {
  std::printf("%-28s AdamW worst |diff| from PyTorch outside key.bias: fused %.3g, before the fused update %.3g\n",
              name.c_str(), f.fused, f.pre_fused);
  EXPECT_LE(f.fused, f.pre_fused) << name << ": the fused update drifted further from PyTorch than the loop before it";
  EXPECT_LE(f.fused, 3e-5) << name << ": beyond the golden tolerance";
}

}  // namespace

TEST(AdamWParity, NearZeroGradientsFollowPyTorch) {
  const auto f = load_safetensors(BOOSTER_ADAMW_GOLDEN);
  const Figures fig{near_zero_case<optim::AdamW>(f), near_zero_case<PreFusedAdamW>(f)};
  report("near-zero gradients (own)", fig);
  // The order of operations is PyTorch's, so the same float operations give the same bits.
  EXPECT_EQ(fig.fused, 0.0) << "AdamW no longer rounds as torch.optim.AdamW does";
}

TEST(AdamWParity, SharedGoldenCases) {
  auto cases = booster::testing::golden_cases();
  ASSERT_FALSE(cases.empty()) << "no golden cases under " << booster::testing::golden_dir();
  for (const auto& dir : cases)
    report(fs::path(dir).filename().string(), {vit_case<optim::AdamW>(dir), vit_case<PreFusedAdamW>(dir)});
}
