// Collectives on tensors (f32, bf16, f16, i64, u8) over a process group, blocking or
// asynchronous (a Work handle to wait on), mirroring torch.distributed. bf16/f16
// reductions accumulate in f32. Messages longer than MPI's int count are split.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dist/process_group.h"
#include "core/tensor/tensor.h"

namespace booster::dist {

enum class ReduceOp { sum, avg, max, min };

/// A collective in flight.
class Work {
 public:
  Work(std::string op, const ProcessGroup& g);
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  /// Blocks until done and finishes (copies staged results back); idempotent.
  void wait();
  /// Progresses the operation without blocking (MPI moves data only inside MPI calls);
  /// finishes it and returns true once it has completed.
  bool test();
  /// True once the operation has finished (wait() or a successful test()).
  bool is_completed() const { return done_; }

  // ---- for the implementation ----
  std::vector<MPI_Request> requests;
  /// Called when `requests` complete: posts the next phase's requests and returns true, or
  /// returns false when the operation is done (collectives built from several rounds).
  std::function<bool()> next_phase;
  std::function<void()> on_complete;
  std::vector<Tensor> keep_alive;

 private:
  void complete();
  std::string op_, group_;
  uint64_t token_;
  bool done_ = false;
};
using WorkPtr = std::shared_ptr<Work>;

/// In place: t = op over the group of t. avg is sum / size (floating tensors only).
WorkPtr all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum, const ProcessGroup& g = ProcessGroup::world(),
                   bool async_op = false);
/// all_reduce of many tensors through one flat buffer (one message).
WorkPtr all_reduce_coalesced(std::vector<Tensor>& ts, ReduceOp op = ReduceOp::sum,
                             const ProcessGroup& g = ProcessGroup::world(), bool async_op = false);
/// output = this rank's block of op(input) where input is size() equal blocks. With
/// input_is_scratch the caller gives up the input (a staging buffer of its own): a floating
/// input of the wire's dtype is reduced in place instead of in a copy (one input-sized
/// buffer less while the reduction is in flight); its contents are unspecified afterwards.
WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum,
                       const ProcessGroup& g = ProcessGroup::world(), bool async_op = false,
                       bool input_is_scratch = false);
/// output = concatenation of every rank's input (output numel = size() * input numel).
WorkPtr all_gather(Tensor& output, const Tensor& input, const ProcessGroup& g = ProcessGroup::world(),
                   bool async_op = false);
/// outputs[r] = rank r's input.
WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input, const ProcessGroup& g = ProcessGroup::world(),
                   bool async_op = false);
/// Bytes this rank has put on the wire in collectives and sends since the start (or the
/// last reset_traffic), each collective counted as a bandwidth-optimal ring moves it: an
/// all-reduce of N bytes 2 (p - 1) / p N, a reduce-scatter of N and an all-gather into N
/// (p - 1) / p N, an all-to-all (p - 1) / p of its input, a broadcast or reduce N, a send N.
/// Groups of one move nothing. What the tensor-parallel formulas are checked against.
int64_t traffic_bytes();
void reset_traffic();

/// t = src's t (src is a world rank).
WorkPtr broadcast(Tensor& t, int src, const ProcessGroup& g = ProcessGroup::world(), bool async_op = false);
/// On dst (a world rank), t = op over the group; other ranks' t is unchanged.
WorkPtr reduce(Tensor& t, int dst, ReduceOp op = ReduceOp::sum, const ProcessGroup& g = ProcessGroup::world(),
               bool async_op = false);
/// Sends t to world rank dst (tags below kUserTagLimit).
WorkPtr send(const Tensor& t, int dst, int tag = 0, const ProcessGroup& g = ProcessGroup::world(), bool async_op = false);
/// Receives into t from world rank src.
WorkPtr recv(Tensor& t, int src, int tag = 0, const ProcessGroup& g = ProcessGroup::world(), bool async_op = false);
/// Waits for every member.
WorkPtr barrier(const ProcessGroup& g = ProcessGroup::world(), bool async_op = false);
/// Sum (or max) of one double over the group: the clip-norm reducer.
double all_reduce_scalar(double v, ReduceOp op, const ProcessGroup& g = ProcessGroup::world());
/// The same for several values at once (one collective).
std::vector<double> all_reduce_doubles(std::vector<double> v, ReduceOp op, const ProcessGroup& g = ProcessGroup::world());
/// The mean of a value over the members that hold one (a pipeline's loss is on its last
/// stage); 0 when none does.
double mean_where_held(std::optional<double> v, const ProcessGroup& g = ProcessGroup::world());
/// Every member's bytes, in group-rank order (metadata: checkpoint descriptors, errors).
std::vector<std::string> all_gather_bytes(const std::string& mine, const ProcessGroup& g = ProcessGroup::world());
/// outputs[r] = input block r of every rank, blocks of equal size (input numel = size() *
/// output numel / size()); output is the concatenation of the blocks received.
WorkPtr all_to_all(Tensor& output, const Tensor& input, const ProcessGroup& g = ProcessGroup::world(),
                   bool async_op = false);

/// Variable blocks: sends input elements [send_offsets[r], + send_counts[r]) to group rank r
/// and receives rank r's block into output [recv_offsets[r], + recv_counts[r]) (MPI_Alltoallv;
/// every count within one MPI message).
WorkPtr all_to_all_v(Tensor& output, const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_offsets,
                     const Tensor& input, const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& send_offsets, const ProcessGroup& g = ProcessGroup::world(),
                     bool async_op = false);

/// Largest element count of one MPI message (INT_MAX by default; tests lower it).
void set_max_message_elements(int64_t n);
int64_t max_message_elements();
/// Calls post(offset, count) for the consecutive messages n elements take (one, of 0
/// elements, when n is 0): how every collective splits its transfers.
void for_each_message(int64_t n, const std::function<void(int64_t, int)>& post);

}  // namespace booster::dist
