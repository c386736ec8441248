// Point-to-point messages between pipeline stages over MPI (Colossal-AI's p2p.py): a
// stage's outputs (named tensors) go to the stage holding the next slot, the gradients of
// its inputs back to the one holding the previous slot. The shapes, dtypes and
// requires_grad of a message are sent ahead of it (a small metadata message) and, with the
// metadata cache, only when the channel's key changes: the micro-batch size and whether the
// step trains, which every stage knows (each reads the batch), so sender and receiver agree
// without asking.
// A gradient message needs no metadata: its receiver sent the tensors it answers.
// Sends and receives are non-blocking; a receive can be posted ahead of its use so the
// transfer overlaps compute (overlap_p2p).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/collectives.h"
#include "core/tensor/tensor_map.h"
#include "pipeline/stage_manager.h"

namespace booster::pipeline {

/// A receive in flight: the tensors being filled and their requests.
struct PendingRecv {
  TensorMap tensors;
  std::vector<std::string> grad_keys;  // received tensors that take a gradient (training)
  std::vector<dist::WorkPtr> work;
};

class PipelineP2P {
 public:
  PipelineP2P(const PipelineStageManager& stages, bool metadata_cache);

  /// Sends chunk `chunk`'s outputs to the next slot (key: see above).
  void send_forward(const TensorMap& outputs, int chunk, int64_t key);
  /// Posts the receive of chunk `chunk`'s inputs from the previous slot (blocks only for the
  /// metadata when it is not cached).
  PendingRecv post_recv_forward(int chunk, int64_t key);
  /// Whether post_recv_forward(chunk, key) needs no metadata message (it would not block).
  bool forward_meta_cached(int chunk, int64_t key) const;
  /// Sends the gradients of chunk `chunk`'s inputs to the previous slot (keys of the
  /// inputs that required a gradient; a missing gradient is sent as zeros).
  void send_backward(const TensorMap& input_grads, int chunk);
  /// Posts the receive of the gradients of chunk `chunk`'s outputs (the tensors sent).
  PendingRecv post_recv_backward(int chunk, const TensorMap& outputs);
  /// Waits for a posted receive; received tensors that carried requires_grad get it when
  /// `requires_grad` (training).
  TensorMap wait(PendingRecv& r, bool requires_grad = false);
  /// Lets transfers in flight progress (MPI moves data only inside MPI calls).
  void progress();
  /// Waits for every send in flight (their buffers are released).
  void wait_sends();

 private:
  struct Meta {
    std::vector<std::string> keys;
    std::vector<DType> dtypes;
    std::vector<Shape> shapes;
    std::vector<bool> requires_grad;
  };
  static std::string encode(const Meta& m);
  static Meta decode(const std::string& s);
  int tag(int kind, int chunk, size_t index = 0) const;

  const PipelineStageManager& sm_;
  bool cache_;
  std::map<int, std::pair<int64_t, std::string>> sent_meta_;  // by receiving slot: (key, meta)
  std::map<int, std::pair<int64_t, Meta>> recv_meta_;         // by own chunk
  std::vector<dist::WorkPtr> sends_;
};

/// Whether a sent output takes a gradient back (floating and requiring one).
bool carries_grad(const Tensor& t);

/// The metadata-cache key of a micro-batch of `rows` rows in a training or forward-only step.
inline int64_t p2p_key(int64_t rows, bool training) { return rows * 2 + (training ? 1 : 0); }

}  // namespace booster::pipeline
