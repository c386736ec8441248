// Progress display (see progress.h).
#include "booster/trainer/progress.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace booster {

ProgressBar::ProgressBar(std::string title, int64_t total, bool interactive, int64_t log_every)
    : title_(std::move(title)), total_(total), log_every_(log_every), interactive_(interactive),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t step, const std::map<std::string, double>& values) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = step > 0 ? elapsed / double(step) * double(total_ - step) : 0;
  const std::string figures = format_step_metrics(values);
  if (interactive_) {
    const int width = 30, filled = total_ > 0 ? int(width * std::min(step, total_) / total_) : 0;
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld %s ETA %.0fs   ", title_.c_str(), bar.c_str(), (long long)step,
                 (long long)total_, figures.c_str(), eta);
    std::fflush(stderr);
    open_ = true;
  } else if (log_every_ > 0 && (step % log_every_ == 0 || step == total_)) {
    spdlog::info("{} step {}/{} {} ETA {:.0f}s", title_, step, total_, figures, eta);
  }
}

void ProgressBar::finish() {
  if (open_) std::fprintf(stderr, "\n");
  open_ = false;
}

std::string format_step_metrics(const std::map<std::string, double>& values) {
  std::string s;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : " ") + part; };
  auto known = [&](const char* name, const char* fmt) {
    auto it = values.find(name);
    if (it != values.end()) add(fmt::format(fmt::runtime(fmt), it->second));
  };
  known("Loss", "loss {:.4f}");
  known("LR", "lr {:.3e}");
  known("Throughput", "{:.1f} img/s");
  for (auto& [name, v] : values)
    if (name != "Loss" && name != "LR" && name != "Throughput") add(fmt::format("{} {:.4g}", name, v));
  return s;
}

}  // namespace booster
