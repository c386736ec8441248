// MultiTimer (see timer.h).
#include "booster/trainer/timer.h"

#include <numeric>

#include "core/common/check.h"

namespace booster {

void MultiTimer::start(const std::string& name) {
  started_[name] = Clock::now();
  history_[name];
}

double MultiTimer::stop(const std::string& name) {
  auto it = started_.find(name);
  BOOSTER_CHECK(it != started_.end(), "MultiTimer: timer '", name, "' was stopped without being started");
  const double s = std::chrono::duration<double>(Clock::now() - it->second).count();
  started_.erase(it);
  history_[name].push_back(s);
  return s;
}

double MultiTimer::last(const std::string& name) const {
  auto it = history_.find(name);
  return it == history_.end() || it->second.empty() ? 0.0 : it->second.back();
}

double MultiTimer::mean(const std::string& name, size_t skip) const {
  auto it = history_.find(name);
  if (it == history_.end() || it->second.size() <= skip) return 0.0;
  const auto& v = it->second;
  return std::accumulate(v.begin() + std::ptrdiff_t(skip), v.end(), 0.0) / double(v.size() - skip);
}

double MultiTimer::total(const std::string& name) const {
  auto it = history_.find(name);
  return it == history_.end() ? 0.0 : std::accumulate(it->second.begin(), it->second.end(), 0.0);
}

size_t MultiTimer::count(const std::string& name) const {
  auto it = history_.find(name);
  return it == history_.end() ? 0 : it->second.size();
}

void MultiTimer::reset(const std::string& name) { history_[name].clear(); }

std::vector<std::string> MultiTimer::names() const {
  std::vector<std::string> out;
  for (auto& [k, v] : history_) out.push_back(k);
  return out;
}

}  // namespace booster
