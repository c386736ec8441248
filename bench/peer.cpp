// PyTorch peer subprocess (see peer.h).
#include "peer.h"

#include "core/kernels/raw.h"

#include <algorithm>
#include <chrono>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <unistd.h>

#include "core/common/check.h"
#include "core/common/profiler.h"

namespace booster::bench {

namespace {

// Debian's torch multiplies through libblas.so.3, whichever BLAS the alternatives system points
// it at. Two of them make the peer a wrong yardstick: the reference BLAS (ViT-Ti fp32 ran 0.58
// img/s on it against 17.6 with OpenBLAS's OpenMP build) and OpenBLAS's pthread build, whose
// threads compete with OpenMP's (5.55).
void warn_about_peer_blas() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", buf.data(), buf.size() - 1);
  if (n <= 0) return;
  const std::string target(buf.data(), size_t(n));
  const char* why = target.find("openblas-pthread") != std::string::npos ? "OpenBLAS's pthread build, whose threads "
                                                                           "compete with OpenMP's"
                    : target.find("/blas/") != std::string::npos ? "the reference BLAS, 10-30x slower than OpenBLAS"
                                                                 : nullptr;
  if (why)
    std::fprintf(stderr,
                 "warning: the PyTorch peer multiplies on %s (libblas.so.3 -> %s): its figures understate PyTorch; "
                 "bash scripts/install_deps.sh --peer installs libopenblas0-openmp; select it with "
                 "update-alternatives --config libblas.so.3-x86_64-linux-gnu\n",
                 why, target.c_str());
}

}  // namespace

bool peer_available() {
  const bool ok = std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  if (ok) warn_about_peer_blas();
  return ok;
}

std::optional<std::string> run_capture(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  if (::pclose(p) != 0) {
    std::fprintf(stderr, "failed (%s):\n%s\n", cmd.c_str(), out.c_str());
    return std::nullopt;
  }
  return out;
}

std::optional<PeerResult> run_peer(const std::string& script, const std::string& model, int batch, int threads,
                                   bool bf16, int steps) {
  const std::string cmd = "/usr/bin/python3 " + script + " --model " + model + " --batch " + std::to_string(batch) +
                          " --threads " + std::to_string(threads) + " --steps " + std::to_string(steps) +
                          (bf16 ? " --bf16" : "");
  const std::optional<std::string> out = run_capture(cmd);
  std::smatch m;
  static const std::regex re(R"(step_s=([0-9.]+) img_s=([0-9.]+) model_GFLOP_s=([0-9.]+))");
  if (!out || !std::regex_search(*out, m, re)) {
    if (out) std::fprintf(stderr, "peer printed no result (%s):\n%s\n", cmd.c_str(), out->c_str());
    return std::nullopt;
  }
  PeerResult r{std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), out->substr(0, out->find('\n'))};
  return r;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0.0;
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

namespace {

// Each op's median over the steps' profiles (0 where a step lacks it), with the calls of the
// step that ran it most; largest first.
std::vector<ProfileEntry> median_entries(const std::vector<std::vector<ProfileEntry>>& per_step) {
  std::map<std::string, std::vector<double>> times;
  std::map<std::string, int64_t> calls;
  for (const auto& entries : per_step)
    for (const ProfileEntry& e : entries) {
      times[e.name].push_back(e.seconds);
      calls[e.name] = std::max(calls[e.name], e.calls);
    }
  std::vector<ProfileEntry> out;
  for (auto& [name, t] : times) {
    t.resize(per_step.size(), 0.0);
    out.push_back({name, median(t), calls[name]});
  }
  std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace

double StepProfile::seconds_of(const std::vector<std::string>& ops) const {
  double s = 0;
  for (auto& e : entries)
    if (std::find(ops.begin(), ops.end(), e.name) != ops.end()) s += e.seconds;
  return s;
}

StepProfile profile_steps(const std::function<void()>& step, int steps) {
  BOOSTER_CHECK(steps >= 1, "profile_step: steps must be at least 1, got ", steps);
  std::vector<std::vector<ProfileEntry>> per_step;
  std::vector<double> walls;
  for (int i = 0; i < steps; ++i) {
    Profiler::reset();
    Profiler::enable();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    Profiler::enable(false);
    per_step.push_back(Profiler::entries());
  }
  Profiler::reset();
  return {median(walls), median_entries(per_step)};
}

std::string profile_step(const std::function<void()>& step, const std::vector<FlopGroup>& groups,
                         double ceiling_gflops, int steps) {
  const StepProfile prof = profile_steps(step, steps);
  const double wall = prof.wall;
  const std::vector<ProfileEntry>& entries = prof.entries;
  double ops = 0;
  for (auto& e : entries) ops += e.seconds;
  char line[256];
  std::snprintf(line, sizeof line,
                "step %.2f ms wall, ops %.2f ms (nested scopes count twice), outside the ops %.2f ms; medians of %d "
                "steps\n",
                wall * 1e3, ops * 1e3, (wall - ops) * 1e3, steps);
  std::string out = line + Profiler::report(entries);
  if (!groups.empty() && ceiling_gflops > 0) {
    std::snprintf(line, sizeof line, "rated against the ceiling (%.1f GFLOP/s):\n", ceiling_gflops);
    out += line;
    double rated_s = 0, rated_gflop = 0;
    for (const FlopGroup& g : groups) {
      const double s = prof.seconds_of(g.ops);
      rated_s += s;
      rated_gflop += g.gflop;
      std::snprintf(line, sizeof line, "  %-22s %8.1f GFLOP in %8.2f ms = %7.1f GFLOP/s, %3.0f %% of the ceiling\n",
                    g.name.c_str(), g.gflop, s * 1e3, s > 0 ? g.gflop / s : 0.0,
                    s > 0 ? 100 * g.gflop / s / ceiling_gflops : 0.0);
      out += line;
    }
    std::snprintf(line, sizeof line,
                  "  everything else        %8.2f ms, %4.1f %% of the step; were it free, the step would run at "
                  "%3.0f %% of the ceiling\n",
                  (wall - rated_s) * 1e3, 100 * (wall - rated_s) / wall,
                  rated_s > 0 ? 100 * rated_gflop / rated_s / ceiling_gflops : 0.0);
    out += line;
  }
  std::string tuned;
  for (const auto& l : kernels::mm_tn_choices()) tuned += "  " + l + "\n";
  return out + (tuned.empty() ? "" : "weight-gradient products, the way each shape runs:\n" + tuned);
}

VitFlops vit_fwd_flop_parts(int64_t d, int64_t layers, int64_t image, int64_t patch) {
  const double patches = double((image / patch) * (image / patch)), t = patches + 1;
  VitFlops f;
  f.linears = double(layers) * 2 * t * (3.0 * d * d + 1.0 * d * d + 8.0 * d * d);
  f.attention = double(layers) * 2 * 2 * t * t * double(d);
  f.patch_embedding = 2.0 * patches * 3 * patch * patch * double(d);
  return f;
}

double vit_fwd_flops(int64_t d, int64_t layers, int64_t image, int64_t patch) {
  return vit_fwd_flop_parts(d, layers, image, patch).total();
}

}  // namespace booster::bench
