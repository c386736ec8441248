// MPI start-up and the abort-on-error handler.
#include "core/dist/runtime.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/dist/logger.h"
#include "core/dist/process_group.h"
#include "core/dist/watchdog.h"
#include "core/common/check.h"
#include "core/tensor/random.h"

namespace booster::dist {

namespace {
bool g_initialized = false;
bool g_we_initialized_mpi = false;
int g_rank = 0, g_size = 1, g_local_rank = 0, g_local_size = 1, g_omp = 1;
std::once_flag g_launch_once;

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

void on_terminate() {
  std::string what = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
      what = "unknown exception";
    }
  }
  abort_job("uncaught exception: " + what, 1);
}

// Installed before main: an error thrown before launch_from_openmpi (a bad config, a
// missing file) prints its message and exits 1 instead of "terminate called" and SIGABRT.
[[maybe_unused]] const bool g_terminate_installed = (std::set_terminate(on_terminate), true);
}  // namespace

void launch_from_openmpi(const LaunchOptions& opts) {
  std::call_once(g_launch_once, [&] {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        abort_job("MPI_Init_thread failed");
      g_we_initialized_mpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &g_local_rank);
    MPI_Comm_size(node, &g_local_size);
    MPI_Comm_free(&node);
    g_initialized = true;
    std::set_terminate(on_terminate);

    const char* env_threads = std::getenv("OMP_NUM_THREADS");
    if (opts.omp_threads > 0) g_omp = opts.omp_threads;
    else if (env_threads && std::atoi(env_threads) > 0) g_omp = std::atoi(env_threads);
    else g_omp = std::max(1, cores_available() / g_local_size);
    omp_set_num_threads(g_omp);

    manual_seed(opts.seed, uint64_t(g_rank));

    double timeout = opts.watchdog_timeout_s;
    if (timeout == 0) {
      const char* env = std::getenv("BOOSTER_COLLECTIVE_TIMEOUT");
      timeout = env ? std::atof(env) : 300.0;
    }
    if (timeout > 0) Watchdog::instance().start(timeout);
    ProcessGroup::world();  // built now, by every rank: its constructor is collective
    std::atexit(finalize);
  });
}

namespace {
// A SLURM variable as an integer; a missing or malformed one is an error naming it.
int slurm_int(const char* name) {
  const char* v = std::getenv(name);
  BOOSTER_CHECK(v && *v, "launch_from_slurm: ", name, " is not set (is this process an srun task?)");
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  BOOSTER_CHECK(*end == '\0' && x >= 0, "launch_from_slurm: ", name, " = '", v, "' is not a count");
  return int(x);
}
}  // namespace

void launch_from_slurm(const LaunchOptions& opts) {
  const int procid = slurm_int("SLURM_PROCID"), nprocs = slurm_int("SLURM_NPROCS");
  launch_from_openmpi(opts);
  if (nprocs != g_size || procid != g_rank)
    abort_job("launch_from_slurm: SLURM started task " + std::to_string(procid) + " of " + std::to_string(nprocs) +
              " (SLURM_PROCID, SLURM_NPROCS) but MPI's world says rank " + std::to_string(g_rank) + " of " +
              std::to_string(g_size) +
              ": start every task with srun --mpi=pmix, or run mpirun inside the allocation (launch_from_openmpi)");
  const char* nodes = std::getenv("SLURM_JOB_NODELIST");
  logger().info("launched by srun: SLURM task {} of {}, job {} on {}", procid, nprocs,
                std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "?", nodes ? nodes : node_name());
}

void launch(const LaunchOptions& opts) {
  const bool srun_step = std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID") &&
                         !std::getenv("OMPI_COMM_WORLD_SIZE");
  if (srun_step) launch_from_slurm(opts);
  else launch_from_openmpi(opts);
}

namespace {
std::mutex g_hooks_mu;
std::vector<std::function<void()>> g_finalize_hooks;
}  // namespace

void add_finalize_hook(std::function<void()> hook) {
  std::lock_guard lock(g_hooks_mu);
  g_finalize_hooks.push_back(std::move(hook));
}

void finalize() {
  if (!g_initialized) return;
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(g_hooks_mu);
    hooks.swap(g_finalize_hooks);
  }
  for (auto& h : hooks) h();
  Watchdog::instance().stop();
  g_initialized = false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized_mpi && !finalized) MPI_Finalize();
}

bool is_initialized() { return g_initialized; }
int world_rank() { return g_rank; }
int world_size() { return g_size; }
int local_rank() { return g_local_rank; }
int local_size() { return g_local_size; }
int omp_threads() { return g_omp; }

std::string node_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

void abort_job(const std::string& message, int code) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  // Before MPI starts the rank is only known from mpirun's environment.
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = init ? g_rank : env_rank ? std::atoi(env_rank) : 0;
  std::fprintf(stderr, "[rank %d] fatal: %s\n", rank, message.c_str());
  std::fflush(stderr);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace booster::dist
