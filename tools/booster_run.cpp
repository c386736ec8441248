// booster_run: runs a training program under mpirun and, when the job dies (a rank killed,
// out of memory, a host gone), starts it again from the newest complete checkpoint with
// `--resume DIR` appended, up to --max-restarts times (torchrun's elastic agent, for MPI
// jobs). A job that dies twice in a row from the same checkpoint without saving a newer one
// is started on one rank fewer, down to --min-ranks (the program keeps its global batch: a
// checkpoint loads at any layout); at --min-ranks it stops, as it does when the job died
// before any complete checkpoint or the restarts are spent, saying which. Every start and
// every end is logged with its cause. Inside a SLURM allocation mpirun takes its hosts from
// the allocation.
// Usage: booster_run --np N [--max-restarts K] [--min-ranks M] --checkpoints DIR
//          [--mpirun PATH] [--mpirun-arg ARG ...] -- PROGRAM ARGS...
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>

#include "booster/trainer/run_checkpoint.h"

using namespace booster;

namespace {

struct Options {
  int np = 0, max_restarts = 3, min_ranks = 0;
  std::string checkpoints, mpirun = BOOSTER_MPIEXEC;
  std::vector<std::string> mpirun_args, command;
};

volatile pid_t g_child = 0;
volatile sig_atomic_t g_stopping = 0;
// SIGINT / SIGTERM reach the job and end the loop: a job stopped on purpose is not restarted.
void forward(int sig) {
  g_stopping = 1;
  if (g_child > 0) kill(g_child, sig);
}

// How an attempt ended, in words, and whether it succeeded.
struct Ending {
  bool ok = false;
  int code = 1;  // the exit code booster_run gives when it stops here
  std::string cause;
};

Ending run_once(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return {false, 1, std::string("fork failed: ") + std::strerror(errno)};
  if (pid == 0) {
    execvp(args[0], args.data());
    std::fprintf(stderr, "booster_run: cannot run '%s': %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {true, 0, "finished"};
  if (WIFSIGNALED(status))
    return {false, 128 + WTERMSIG(status), std::string("mpirun ended by signal ") + strsignal(WTERMSIG(status))};
  const int code = WEXITSTATUS(status);
  std::string why = "exit status " + std::to_string(code);
  if (code == 127) why += " (the command was not found)";
  else if (code == 128 + SIGKILL) why += " (a rank was killed: SIGKILL, as the out-of-memory killer sends)";
  return {false, code, "the job ended with " + why};
}

class Supervisor {
 public:
  explicit Supervisor(Options o) : o_(std::move(o)), ranks_(o_.np) {}

  int run() {
    for (int attempt = 0;; ++attempt) {
      const std::optional<std::string> from = latest_checkpoint(o_.checkpoints);
      const auto t0 = std::chrono::steady_clock::now();
      spdlog::info("booster_run: start {} of at most {}, {} rank(s), {}", attempt + 1, o_.max_restarts + 1, ranks_,
                   from ? "resuming from " + *from : std::string("from the beginning (no complete checkpoint yet)"));
      const Ending e = run_once(argv(from.has_value()));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (e.ok) {
        spdlog::info("booster_run: the job finished after {:.1f} s (start {}, {} restart(s))", s, attempt + 1, attempt);
        return 0;
      }
      spdlog::warn("booster_run: {} after {:.1f} s", e.cause, s);
      if (g_stopping) return stop(e, "stopped by a signal to booster_run: not restarted");
      if (attempt == o_.max_restarts) return stop(e, "the " + std::to_string(o_.max_restarts) + " restart(s) allowed are spent");
      const std::optional<std::string> now = latest_checkpoint(o_.checkpoints);
      if (!now) return stop(e, "it saved no complete checkpoint under '" + o_.checkpoints + "' to restart from");
      if (!next_layout(from, *now)) {
        return stop(e, "it died twice in a row from " + *now + " without saving a newer checkpoint, on " +
                           std::to_string(ranks_) + " rank(s), the fewest --min-ranks allows");
      }
    }
  }

 private:
  // After a failure: the same ranks again, or one fewer when the job died twice in a row
  // from the same checkpoint; false when that would go below --min-ranks.
  bool next_layout(const std::optional<std::string>& from, const std::string& now) {
    const bool progressed = !from || *from != now;
    stalled_ = progressed ? 0 : stalled_ + 1;
    if (stalled_ < 2) {
      if (!progressed) spdlog::warn("booster_run: no newer checkpoint than {}; once more on {} rank(s)", now, ranks_);
      return true;
    }
    if (ranks_ - 1 < o_.min_ranks) return false;
    --ranks_, stalled_ = 0;
    spdlog::warn("booster_run: died twice from {}: restarting on {} rank(s) (--min-ranks {})", now, ranks_, o_.min_ranks);
    return true;
  }

  std::vector<std::string> argv(bool resume) const {
    std::vector<std::string> a{o_.mpirun, "-np", std::to_string(ranks_)};
    a.insert(a.end(), o_.mpirun_args.begin(), o_.mpirun_args.end());
    a.insert(a.end(), o_.command.begin(), o_.command.end());
    if (resume) a.insert(a.end(), {"--resume", o_.checkpoints});
    return a;
  }

  int stop(const Ending& e, const std::string& why) const {
    spdlog::error("booster_run: stopping: {} ({})", why, e.cause);
    return e.code == 0 ? 1 : e.code;
  }

  Options o_;
  int ranks_;
  int stalled_ = 0;  // consecutive deaths from the same checkpoint
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Run a training job under mpirun, restarting it from its newest checkpoint when a rank dies"};
  Options o;
  app.add_option("--np", o.np, "ranks to start with")->required()->check(CLI::PositiveNumber);
  app.add_option("--max-restarts", o.max_restarts, "restarts allowed after the first start")->check(CLI::NonNegativeNumber);
  app.add_option("--min-ranks", o.min_ranks, "the fewest ranks a restart may shrink to (default: --np, never shrink)");
  app.add_option("--checkpoints", o.checkpoints, "the folder the program saves its step-N checkpoints in")->required();
  app.add_option("--mpirun", o.mpirun, "the MPI launcher")->capture_default_str();
  app.add_option("--mpirun-arg", o.mpirun_args, "an argument for the launcher (repeat: --mpirun-arg=--oversubscribe)")
      ->allow_extra_args(false);
  app.add_option("command", o.command, "after --: the program and its arguments")->required();
  CLI11_PARSE(app, argc, argv);
  if (o.min_ranks == 0) o.min_ranks = o.np;
  if (o.min_ranks < 1 || o.min_ranks > o.np) {
    std::fprintf(stderr, "booster_run: --min-ranks %d must be in [1, --np %d]\n", o.min_ranks, o.np);
    return 2;
  }
  for (const auto& a : o.command)
    if (a == "--resume") {
      std::fprintf(stderr, "booster_run: the command has its own --resume; booster_run appends it on a restart\n");
      return 2;
    }
  std::signal(SIGINT, forward);
  std::signal(SIGTERM, forward);
  return Supervisor(std::move(o)).run();
}
