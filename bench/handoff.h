// How far apart this process's threads are, as a cache line sees it: the round trip of one
// line handed back and forth between two of its OpenMP threads. Where their CPUs share an L3
// it takes tens of ns; across L3 domains (two CCDs of an EPYC) several hundred. A shared VM
// moves its vCPUs between such placements, and a process whose threads hand data to each other
// runs slower in the second, so the benchmarks print it beside their figures.
#pragma once

namespace booster::bench {

/// Mean round trip in ns of a cache line between OpenMP threads 0 and 1 of a team of two, over
/// `round_trips`; NaN with fewer than two OpenMP threads, or when one thread does not answer
/// the other within a second (their CPU taken by something else).
double omp_thread_handoff_ns(int round_trips = 20000);

}  // namespace booster::bench
