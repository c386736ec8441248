// Whether ops record autograd history on this thread (a no-grad scope turns it off).
#pragma once

namespace booster::autograd {

/// Thread-local switch consulted by every op.
struct GradMode {
  static bool enabled();
  static void set_enabled(bool on);
};

/// Disables history recording for its lifetime (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace booster::autograd

namespace booster {
using autograd::NoGradGuard;
}
