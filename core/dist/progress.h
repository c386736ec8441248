// Background progress for collectives in flight. MPI moves a message, and a ring collective
// starts its next round, only inside an MPI call on that rank; a rank busy in its backward
// leaves its gradient all-reduce standing until it next tests the Work, so the ranks of a
// ring wait on each other's compute. With the progress thread on, one thread per process
// tests every asynchronous Work every poll interval while the caller computes: messages
// move and rounds advance (their reductions run on that thread). A Work's completion
// (staged results copied back, its callbacks) still runs where the owner tests or waits.
// Off by default; on with set_progress_thread(true) or BOOSTER_COMM_THREAD=1 (poll interval
// BOOSTER_COMM_POLL_US, default 50); needs MPI_THREAD_MULTIPLE.
#pragma once

#include <cstdint>

namespace booster::dist {

class Work;

/// Turns the progress thread on or off (off: it stops after its current pass).
void set_progress_thread(bool on, int64_t poll_us = 50);
bool progress_thread_enabled();

namespace detail {
/// The progress thread starts testing w (an asynchronous Work just posted).
void progress_track(Work* w);
/// w is going away: it is forgotten, after any test of it in progress has returned.
void progress_untrack(Work* w);
}  // namespace detail

}  // namespace booster::dist
