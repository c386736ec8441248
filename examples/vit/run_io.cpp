// Progress bar, metrics lines and gnuplot curves (see run_io.h).
#include "run_io.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/common/check.h"

namespace booster::examples {

ProgressBar::ProgressBar(std::string title, int64_t total, bool interactive, int64_t log_every)
    : title_(std::move(title)), total_(total), log_every_(std::max<int64_t>(1, log_every)), interactive_(interactive),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t step, double loss, double lr, double ips) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = step > 0 ? elapsed / double(step) * double(total_ - step) : 0;
  if (interactive_) {
    const int width = 30, filled = total_ > 0 ? int(width * step / total_) : 0;
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld loss %.4f lr %.2e %.1f img/s ETA %.0fs   ", title_.c_str(), bar.c_str(),
                 (long long)step, (long long)total_, loss, lr, ips, eta);
    std::fflush(stderr);
  } else if (step % log_every_ == 0 || step == total_) {
    spdlog::info("{} step {}/{} loss {:.4f} lr {:.3e} {:.1f} img/s ETA {:.0f}s", title_, step, total_, loss, lr, ips, eta);
  }
}

void ProgressBar::finish() {
  if (interactive_) std::fprintf(stderr, "\n");
}

MetricsLog::MetricsLog(const std::string& dir, bool append, bool writer) : dir_(dir) {
  if (!writer) return;
  std::filesystem::create_directories(dir);
  const auto path = std::filesystem::path(dir) / "metrics.jsonl";
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  BOOSTER_CHECK_T(IOError, f_ != nullptr, "cannot open '", path.string(), "' for writing: ", std::strerror(errno));
  tb_ = std::make_unique<SummaryWriter>(dir);
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!f_) return;
  std::fprintf(f_, "%s\n", line.dump().c_str());
  std::fflush(f_);
  const std::string type = line.value("type", "");
  const int64_t step = line.value("step", int64_t(0));
  auto scalar = [&](const char* key, const char* tag) {
    if (line.contains(key) && line[key].is_number()) tb_->add_scalar(tag, line[key].get<double>(), step);
  };
  if (type == "step") {
    scalar("loss", "train/loss"), scalar("lr", "train/lr"), scalar("images_per_s", "train/images_per_s");
  } else if (type == "epoch") {
    scalar("train_loss", "train/epoch_loss"), scalar("val_loss", "val/loss"), scalar("val_accuracy", "val/accuracy");
  }
  tb_->flush();
}

void MetricsLog::epoch(int64_t epoch, double train_loss, double val_loss, double val_accuracy) {
  if (!f_) return;
  points_.push_back({epoch, train_loss, val_loss, val_accuracy});
  plot();
}

void MetricsLog::plot() {
  namespace fs = std::filesystem;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    if (!warned_) spdlog::warn("gnuplot is not installed: no curves.png (apt-get install gnuplot-nox)");
    warned_ = true;
    return;
  }
  const auto data = fs::path(dir_) / "curves.dat", script = fs::path(dir_) / "curves.gp";
  {
    std::ofstream d(data);
    for (auto& p : points_) d << p.epoch << " " << p.train_loss << " " << p.val_loss << " " << p.val_acc << "\n";
    std::ofstream g(script);
    g << "set terminal pngcairo size 1000,420 noenhanced\nset output '" << (fs::path(dir_) / "curves.png").string() << "'\n"
      << "set multiplot layout 1,2\nset xlabel 'epoch'\nset grid\n"
      << "set title 'loss'\nplot '" << data.string() << "' using 1:2 with linespoints title 'train', '' using 1:3 with "
      << "linespoints title 'validation'\n"
      << "set title 'validation accuracy'\nset yrange [0:1]\nplot '" << data.string()
      << "' using 1:4 with linespoints title 'accuracy'\nunset multiplot\n";
  }
  if (std::system(("gnuplot '" + script.string() + "' >/dev/null 2>&1").c_str()) != 0)
    spdlog::warn("gnuplot failed to draw {}", (fs::path(dir_) / "curves.png").string());
}

}  // namespace booster::examples
