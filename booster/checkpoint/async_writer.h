// Saves that do not stop training (Colossal-AI's use_async): a background thread runs the
// writing part of checkpoint saves, one task after another, while training goes on. A task
// is collective over the world's ranks on a communicator of its own (the checkpoint group,
// split from the world at the first task), so its collectives never meet training's; an
// error on any rank becomes every rank's, kept and raised by the next synchronize() (a save
// or load waits for the saves in flight first: one staged snapshot at a time). The writer
// waits for its tasks when it is destroyed and before MPI finalizes, so a program that ends
// with saves in flight still finishes them.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "booster/checkpoint/staging_arena.h"
#include "core/dist/process_group.h"

namespace booster::ckpt {

class AsyncWriter {
 public:
  /// A task: runs on the background thread with the checkpoint group (null in a world of one).
  using Task = std::function<void(const dist::ProcessGroup* group)>;
  AsyncWriter() = default;
  ~AsyncWriter();
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;

  /// Queues a task (called by every rank, in the same order). `what` names it in errors;
  /// `kind` ("model", "optimizer") says what it saves.
  void submit(Task task, const std::string& what, const std::string& kind = "");
  /// Waits for every queued task; raises the first error any of them met (on every rank).
  void synchronize();
  /// Whether a task of `kind` (any kind when empty) was submitted since the last
  /// synchronize(): the same answer on every rank (every rank submits the same tasks).
  bool pending(const std::string& kind = "") const { return kind.empty() ? !pending_.empty() : pending_.count(kind) > 0; }
  /// The staging memory of saves of `kind`, kept between them (a save of a kind waits for the
  /// one in flight before it stages, so one arena a kind suffices).
  StagingArena& arena(const std::string& kind) {
    auto& a = arenas_[kind];
    if (!a) a = std::make_unique<StagingArena>();
    return *a;
  }
  /// Waits for the tasks of every writer alive (MPI's finalize calls it), logging errors.
  static void synchronize_all() noexcept;

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Task, std::string>> queue_;
  bool running_task_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
  dist::GroupPtr group_;
  std::set<std::string> pending_;  // the foreground's record of what it submitted
  std::map<std::string, std::unique_ptr<StagingArena>> arenas_;  // outlive the thread's tasks
};

}  // namespace booster::ckpt
