// HookHandle: what registering a hook returns. It removes the hook when destroyed (or on
// remove()), so whoever registers a hook owns it and a dead owner never leaves a hook
// pointing at freed memory (PyTorch's ~Reducer removes its hooks for the same reason).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace booster {

class [[nodiscard]] HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  ~HookHandle() { remove(); }
  HookHandle(HookHandle&& o) noexcept : remover_(std::exchange(o.remover_, nullptr)) {}
  HookHandle& operator=(HookHandle&& o) noexcept {
    if (this != &o) {
      remove();
      remover_ = std::exchange(o.remover_, nullptr);
    }
    return *this;
  }
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;

  /// Removes the hook now (idempotent).
  void remove() {
    if (auto r = std::exchange(remover_, nullptr)) r();
  }
  /// True while the handle still owns a hook.
  bool active() const { return remover_ != nullptr; }

 private:
  std::function<void()> remover_;
};

/// Hooks keyed by id, so a handle can remove exactly its own; firing iterates over a copy
/// so a hook may remove itself (or others) while the list runs.
template <typename Fn>
class HookList {
 public:
  /// Adds a hook; the returned id removes it.
  uint64_t add(Fn fn) {
    hooks_.emplace_back(++next_, std::move(fn));
    return next_;
  }
  void remove(uint64_t id) {
    for (auto it = hooks_.begin(); it != hooks_.end(); ++it)
      if (it->first == id) {
        hooks_.erase(it);
        return;
      }
  }
  bool empty() const { return hooks_.empty(); }
  size_t size() const { return hooks_.size(); }
  /// Calls every hook with args, in registration order.
  template <typename... A>
  void fire(A&&... args) const {
    if (hooks_.empty()) return;
    auto copy = hooks_;
    for (auto& [id, fn] : copy) fn(args...);
  }

 private:
  std::vector<std::pair<uint64_t, Fn>> hooks_;
  uint64_t next_ = 0;
};

}  // namespace booster
