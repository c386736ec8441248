// AsyncWriter (see async_writer.h).
#include "booster/checkpoint/async_writer.h"

#include <spdlog/spdlog.h>

#include <set>

#include "booster/checkpoint/state_io.h"
#include "core/dist/runtime.h"

namespace booster::ckpt {

namespace {
std::mutex g_alive_mu;
std::set<AsyncWriter*> g_alive;
}  // namespace

AsyncWriter::~AsyncWriter() {
  {
    std::lock_guard lock(g_alive_mu);
    g_alive.erase(this);
  }
  try {
    synchronize();
  } catch (const std::exception& e) {
    spdlog::error("an asynchronous checkpoint save failed: {}", e.what());
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncWriter::submit(Task task, const std::string& what, const std::string& kind) {
  pending_.insert(kind);
  if (!thread_.joinable()) {
    // The first task: the checkpoint group (collective: every rank submits the same tasks)
    // and the thread; MPI's finalize waits for this writer from now on.
    if (dist::is_initialized() && dist::world_size() > 1)
      group_ = dist::split_group(dist::ProcessGroup::world(), 0, dist::world_rank(), "checkpoint");
    static std::once_flag hook;
    std::call_once(hook, [] { dist::add_finalize_hook(&AsyncWriter::synchronize_all); });
    {
      std::lock_guard lock(g_alive_mu);
      g_alive.insert(this);
    }
    thread_ = std::thread([this] { run(); });
  }
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(std::move(task), what);
  }
  cv_.notify_all();
}

void AsyncWriter::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [task, what] = std::move(queue_.front());
    queue_.pop_front();
    running_task_ = true;
    lock.unlock();
    std::exception_ptr err;
    try {
      // Collective over the checkpoint group: an error on one rank is raised on every rank.
      on_every_rank([&] { task(group_.get()); }, what, group_.get());
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_) error_ = err;
    running_task_ = false;
    cv_.notify_all();
  }
}

void AsyncWriter::synchronize() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !running_task_ && queue_.empty(); });
  pending_.clear();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void AsyncWriter::synchronize_all() noexcept {
  std::lock_guard lock(g_alive_mu);
  for (AsyncWriter* w : g_alive) {
    try {
      w->synchronize();
    } catch (const std::exception& e) {
      spdlog::error("an asynchronous checkpoint save failed: {}", e.what());
    }
  }
}

}  // namespace booster::ckpt
