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

void finalize() {
  if (!g_initialized) return;
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
