// The backward engine and the helper ops use to record history.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"

namespace booster::autograd {

/// Runs backward from `roots`; grads[i] may be undefined for a one-element root.
/// Without retain_graph the graph's saved tensors are freed as it goes.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

/// The gradients of `inputs` (leaves that require grad) from a backward through `roots`,
/// as torch.autograd.grad: no .grad is written and no leaf hook runs; every other leaf the
/// backward reaches is passed over; an input it does not reach gets an undefined tensor.
/// Threads may run it at once on graphs that share leaves.
/// only_inputs: a leaf that requires grad, is not an input and receives a gradient is an
/// error naming it instead (for callers that must not lose a gradient).
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph = false, bool only_inputs = false);

/// Adds each gradient (undefined: none) into its leaf's .grad through the leaf's
/// accumulator, as one backward pass of its own: the leaves' hooks fire, queue_callback
/// works and the callbacks run at the end (zero-bubble's deferred weight gradients).
void accumulate_into_leaves(std::vector<std::pair<Tensor, Tensor>> grads);

/// True while a backward with retain_graph runs on this thread (a node whose backward runs
/// a backward of its own passes it on).
bool retaining_graph();

/// An alias of t (same storage) whose backward calls hook() when t's gradient arrives,
/// at most once per backward pass, then passes the gradient on unchanged. Module
/// backward-pre hooks are built from it. Returns t itself when no history is recorded.
Tensor on_gradient(const Tensor& t, std::function<void()> hook);

/// Runs `fn` once the backward running on this thread has finished its whole graph
/// (PyTorch's Variable._execution_engine.queue_callback): the outermost backward, when one
/// runs inside another's node; callbacks run in the order queued, and one may queue more.
/// Called outside a backward, it throws AutogradError. A backward that throws drops its
/// callbacks. Data parallelism finishes its gradient reduction this way, so a plain
/// loss.backward() leaves synchronized gradients.
void queue_callback(std::function<void()> fn);

/// True while a backward (or grad()) runs on this thread.
bool in_backward();

/// Counts backward passes (each backward() call is one); hooks use it to fire once a pass.
uint64_t backward_pass_id();

/// Inside a backward function: the gradient of its input `input` is sparse by rows, as an
/// embedding table's is (a few of its [V, D] rows touched). The engine adds rows[i] (f32
/// [U, D]) into row indices[i] (i64 [U], each index once) of that input's gradient where it
/// sums the input's gradients: in place into what is there (a tied head's dense gradient),
/// else onto zeros, so no dense [V, D] gradient of its own is made. The function returns an
/// undefined tensor for that input; whatever consumes the gradient sees it dense.
void add_rows_to_gradient(size_t input, Tensor indices, Tensor rows);

/// Makes a non-leaf tensor keep its gradient in .grad during backward.
void retain_grad(const Tensor& t);

/// True when an op on these inputs must record history.
bool needs_grad(const std::vector<Tensor>& inputs);

/// Attaches a backward to `out` when any input requires grad (and grad mode is on):
/// `fn` gets the gradient of out and returns one gradient per input (undefined where an
/// input needs none). Returns out.
Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor out, BackwardFn fn);

/// As record() for ops with several outputs; fn gets one gradient per output (undefined
/// where an output received none).
void record_multi(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor>& outs, BackwardFn fn);

}  // namespace booster::autograd
