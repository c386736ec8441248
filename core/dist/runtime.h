// The Open MPI runtime: start-up (thread level, per-rank seeds, OpenMP threads per rank),
// world and node facts, and the rule that an error on one rank ends the whole job.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace booster::dist {

/// What launch_from_openmpi sets up.
struct LaunchOptions {
  uint64_t seed = 1024;      // Colossal-AI's default; each rank draws from stream `rank`
  int omp_threads = 0;       // 0: cores on the node / ranks on the node, unless OMP_NUM_THREADS is set
  double watchdog_timeout_s = 0;  // 0: BOOSTER_COLLECTIVE_TIMEOUT or 300 s; < 0 disables
};

/// Initializes MPI (MPI_THREAD_MULTIPLE), seeds every rank, sets the OpenMP thread count,
/// starts the collective watchdog and installs the abort-on-error handler. Works as a
/// plain single process without mpirun. Safe to call more than once.
void launch_from_openmpi(const LaunchOptions& opts = {});
/// Colossal-AI's launch_from_slurm: ranks started by srun (`srun --mpi=pmix`, Open MPI
/// under SLURM's PMIx), their rank and count read from SLURM_PROCID and SLURM_NPROCS (a
/// missing one is an error naming it), then launch_from_openmpi; refused when MPI's world
/// is not SLURM's tasks (a program run once in the batch script, say). The head node and
/// port Colossal-AI's takes are MPI's business here.
void launch_from_slurm(const LaunchOptions& opts = {});
/// The launcher the environment names: launch_from_slurm in ranks an srun step started
/// (SLURM_STEP_ID and SLURM_PROCID set, no mpirun's OMPI_COMM_WORLD_SIZE), else
/// launch_from_openmpi (mpirun, inside a SLURM allocation or not, or a plain process).
void launch(const LaunchOptions& opts = {});
/// Finalizes MPI (also registered with atexit by launch), after running the finalize hooks.
void finalize();
/// Runs `hook` at the start of finalize (before MPI ends): work that still needs MPI, such
/// as checkpoint saves in flight. Hooks run once, in the order added.
void add_finalize_hook(std::function<void()> hook);
/// True between launch and finalize.
bool is_initialized();

int world_rank();
int world_size();
/// Rank among the processes on this node.
int local_rank();
/// Number of processes on this node.
int local_size();
/// Host name of this node.
std::string node_name();
/// The OpenMP thread count launch chose.
int omp_threads();

/// Prints "[rank r] fatal: message" to stderr and ends every rank of the job (MPI_Abort
/// with `code`); never returns. Works before MPI is initialized too (plain exit).
[[noreturn]] void abort_job(const std::string& message, int code = 1);

}  // namespace booster::dist
