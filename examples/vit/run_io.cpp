// Metrics lines, gnuplot curves and the hook writing them (see run_io.h).
#include "run_io.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/common/check.h"
#include "core/dist/logger.h"
#include "core/dist/runtime.h"

namespace booster::examples {

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

void RunRecordHook::after_train_iter(Trainer& t, const IterationOutput&) {
  if (t.cur_step() % log_every_ == 0) {
    auto value = [&](const char* name) { return t.has_metric(Mode::train, name) ? t.metric(Mode::train, name).last_step_value() : 0.0; };
    metrics_->write({{"type", "step"}, {"epoch", t.cur_epoch()}, {"step", t.cur_step()}, {"loss", value("Loss")},
                     {"lr", value("LR")}, {"images_per_s", value("Throughput")}});
  }
  if (kill_after_ > 0 && t.cur_step() == kill_after_) std::raise(SIGKILL);
}

void RunRecordHook::after_test_epoch(Trainer& t) {
  auto* val_loss = dynamic_cast<const LossMetric*>(&t.metric(Mode::test, "Loss"));
  auto* acc = dynamic_cast<const AccuracyMetric*>(&t.metric(Mode::test, "Accuracy"));
  BOOSTER_CHECK(val_loss && acc, "RunRecordHook: needs LossHook and AccuracyHook");
  double& best = t.records()["best_accuracy"];
  best = std::max(best, acc->accumulated_value());
  const double train_loss = t.metric(Mode::train, "Loss").accumulated_value(), seconds = t.timer().last("Train-epoch");
  const int64_t epoch = t.cur_epoch() + 1;
  dist::logger().info("epoch {}/{}: train loss {:.4f}, validation loss {:.4f}, accuracy {:.4f} (best {:.4f}), {:.1f} s",
                      epoch, t.epochs(), train_loss, val_loss->accumulated_value(), acc->accumulated_value(), best, seconds);
  metrics_->write({{"type", "epoch"}, {"epoch", epoch}, {"step", t.cur_step()}, {"train_loss", train_loss},
                   {"val_loss", val_loss->accumulated_value()}, {"val_accuracy", acc->accumulated_value()},
                   {"val_samples", acc->samples()}, {"best_accuracy", best}, {"epoch_seconds", seconds},
                   {"per_class_accuracy", acc->per_class_accuracy()}});
  metrics_->epoch(epoch, train_loss, val_loss->accumulated_value(), acc->accumulated_value());
}

}  // namespace booster::examples
