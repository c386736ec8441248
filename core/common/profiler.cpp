// Profiler storage and report.
#include "core/common/profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

namespace booster {

namespace {
std::mutex g_mu;
std::map<std::string, ProfileEntry>& table() {
  static auto* t = new std::map<std::string, ProfileEntry>;
  return *t;
}
bool env_enabled() {
  const char* e = std::getenv("BOOSTER_PROFILE");
  return e && *e && *e != '0';
}
}  // namespace

bool Profiler::enabled_ = env_enabled();

void Profiler::enable(bool on) { enabled_ = on; }

namespace {
thread_local double t_weight = 1.0;
}

ProfileShareGuard::ProfileShareGuard(double weight) : prev_(t_weight) { t_weight = weight; }
ProfileShareGuard::~ProfileShareGuard() { t_weight = prev_; }

void Profiler::add(const char* name, double seconds) {
  std::lock_guard lock(g_mu);
  auto& e = table()[name];
  e.name = name;
  e.seconds += seconds * t_weight;
  ++e.calls;
}

std::vector<ProfileEntry> Profiler::entries() {
  std::lock_guard lock(g_mu);
  std::vector<ProfileEntry> v;
  for (auto& [n, e] : table()) v.push_back(e);
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.seconds > b.seconds; });
  return v;
}

void Profiler::reset() {
  std::lock_guard lock(g_mu);
  table().clear();
}

std::string Profiler::report() { return report(entries()); }

std::string Profiler::report(const std::vector<ProfileEntry>& v) {
  double total = 0;
  for (auto& e : v) total += e.seconds;
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %10s %8s %7s\n", "op", "ms", "calls", "share");
  out += line;
  for (auto& e : v) {
    std::snprintf(line, sizeof line, "%-28s %10.2f %8lld %6.1f%%\n", e.name.c_str(), e.seconds * 1e3, (long long)e.calls,
                  total > 0 ? 100 * e.seconds / total : 0.0);
    out += line;
  }
  return out;
}

}  // namespace booster
