// Backward engine: discovers the graph below the roots, counts dependencies, and runs
// ready nodes newest first (so parameters used last get their final gradient first, as
// data parallel's bucketed all-reduce wants), summing gradients that meet at a node.
#include "core/autograd/engine.h"

#include <atomic>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/autograd/weight_grad_store.h"
#include "core/common/profiler.h"
#include "core/kernels/raw.h"

namespace booster::autograd {

namespace {
thread_local bool t_grad_enabled = true;
// Row-sparse gradients a running backward function handed over (add_rows_to_gradient).
struct RowGradient {
  size_t input;
  Tensor indices, rows;
};
thread_local std::vector<RowGradient>* t_row_gradients = nullptr;
std::atomic<uint64_t> g_next_seq{0};
std::atomic<uint64_t> g_backward_pass{0};
}  // namespace

uint64_t backward_pass_id() { return g_backward_pass.load(std::memory_order_relaxed); }

bool GradMode::enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool on) { t_grad_enabled = on; }

Node::Node(std::string name) : seq_(g_next_seq.fetch_add(1, std::memory_order_relaxed)), name_(std::move(name)) {}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grad_outputs) {
  BOOSTER_CHECK_T(AutogradError, !released_, "backward through '", name(),
                  "' a second time: its saved tensors were freed by the first backward; pass "
                  "retain_graph=true to the first backward to run it again");
  return fn_(grad_outputs);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {
  seq_ = UINT64_MAX;  // leaves run as soon as their gradient is complete
}

namespace {
// Adds g into impl's .grad, in impl's dtype; takes g's buffer when nothing else holds it.
void add_to_grad(TensorImpl& impl, Tensor g) {
  if (impl.grad) {
    Tensor acc(impl.grad);
    kernels::add_(acc, g);
  } else if (g.dtype() == impl.dtype && g.is_contiguous() && g.is_sole_owner()) {
    impl.grad = g.impl_ptr();
  } else {
    impl.grad = (g.dtype() == impl.dtype ? g.contiguous().clone() : g.to(impl.dtype)).impl_ptr();
  }
}
}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor leaf(leaf_);
  if (grad_outputs[0].defined()) {
    leaf_->pre_accumulate_grad_hooks.fire(leaf);
    add_to_grad(*leaf_, std::move(grad_outputs[0]));
  }
  leaf_->post_accumulate_grad_hooks.fire(leaf);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return Edge{impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return Edge{};
  // Threads that each run a share of a batch record ops on the same parameters at once.
  static std::mutex mu;
  std::lock_guard lock(mu);
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
std::shared_ptr<Node> make_node(const char* name, const std::vector<Tensor>& inputs, BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->next_edges.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  for (const auto& t : inputs) {
    if (t.defined() && t.requires_grad()) {
      node->next_edges.push_back(gradient_edge(t));
      node->input_meta.push_back({t.shape(), t.dtype()});
    } else {
      node->next_edges.push_back(Edge{});
      node->input_meta.push_back({t.defined() ? t.shape() : Shape{}, t.defined() ? t.dtype() : DType::f32});
    }
  }
  return node;
}
}  // namespace

Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor out, BackwardFn fn) {
  if (!needs_grad(inputs)) return out;
  auto node = make_node(name, inputs, std::move(fn));
  TensorImpl* o = out.impl();
  o->grad_fn = std::move(node);
  o->output_nr = 0;
  o->requires_grad = true;
  return out;
}

void record_multi(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor>& outs, BackwardFn fn) {
  if (!needs_grad(inputs)) return;
  auto node = make_node(name, inputs, std::move(fn));
  node->num_outputs = int(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    TensorImpl* o = outs[i].impl();
    o->grad_fn = node;
    o->output_nr = int(i);
    o->requires_grad = true;
  }
}

Tensor on_gradient(const Tensor& t, std::function<void()> hook) {
  if (!needs_grad({t})) return t;
  Tensor alias = make_view(t, t.shape(), t.strides(), t.offset());
  auto last = std::make_shared<uint64_t>(UINT64_MAX);
  return record("GradientHook", {t}, alias, [hook = std::move(hook), last](const std::vector<Tensor>& g) {
    if (*last != backward_pass_id()) {
      *last = backward_pass_id();
      hook();
    }
    return std::vector<Tensor>{g[0]};
  });
}

void add_rows_to_gradient(size_t input, Tensor indices, Tensor rows) {
  BOOSTER_CHECK_T(AutogradError, t_row_gradients != nullptr, "add_rows_to_gradient: called outside a backward function");
  t_row_gradients->push_back({input, std::move(indices), std::move(rows)});
}

void retain_grad(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->grad_fn || impl->retains_grad) return;
  auto& r = impl->grad_fn->retained;
  r.resize(size_t(impl->grad_fn->num_outputs));
  r[size_t(impl->output_nr)] = t.impl_ptr();
  impl->retains_grad = true;
}

namespace {

void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
  } else if (slot.is_contiguous() && slot.is_sole_owner()) {
    kernels::add_(slot, g);
  } else {
    Tensor sum = slot.contiguous().clone();
    kernels::add_(sum, g);
    slot = sum;
  }
}

struct ByNewest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

}  // namespace

namespace {

// Where grad() collects its inputs' gradients: the leaves' accumulators, each with its slot.
struct Capture {
  std::unordered_map<const Node*, size_t> slot;
  std::vector<Tensor> grads;
  bool only_inputs = false;
};

thread_local bool t_retaining = false;
thread_local int t_depth = 0;  // backwards running on this thread, nested ones counted
thread_local std::vector<std::function<void()>> t_callbacks;  // the outermost one's, queued

// Marks a backward running on this thread; the outermost runs the queued callbacks once its
// graph is done (finish()), or drops them when it throws.
struct BackwardScope {
  BackwardScope() { ++t_depth; }
  ~BackwardScope() {
    if (--t_depth == 0) t_callbacks.clear();
  }
  void finish() {
    if (t_depth != 1) return;
    for (size_t i = 0; i < t_callbacks.size(); ++i) {  // a callback may queue another
      auto fn = std::move(t_callbacks[i]);
      fn();
    }
    t_callbacks.clear();
  }
};

void run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
               Capture* capture);

// The engine: backward() accumulates into the leaves' .grad (capture null); grad() collects
// the gradients of its inputs in capture and passes every other leaf over.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
                  Capture* capture) {
  BOOSTER_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  BackwardScope scope;
  run_graph(roots, grads, retain_graph, capture);
  scope.finish();
}

using Seeds = std::vector<std::pair<Edge, Tensor>>;

// The roots' edges and their seed gradients (ones for a one-element root without one).
Seeds seed_edges(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  Seeds seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    BOOSTER_CHECK_T(AutogradError, r.requires_grad(), "backward: tensor ", r.describe(),
                    " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      BOOSTER_CHECK_T(AutogradError, r.numel() == 1, "backward: grad can be omitted only for a one-element tensor, got ",
                      r.describe(), "; pass a gradient of the same shape");
      g = Tensor::ones(r.shape(), r.dtype());
    }
    BOOSTER_CHECK_T(ShapeError, g.shape() == r.shape(), "backward: gradient shape ", shape_str(g.shape()),
                    " does not match tensor shape ", shape_str(r.shape()));
    BOOSTER_CHECK_T(DTypeError, g.dtype() == r.dtype(), "backward: gradient dtype ", dtype_name(g.dtype()),
                    " does not match tensor dtype ", dtype_name(r.dtype()));
    seeds.push_back({gradient_edge(r), g});
  }
  return seeds;
}

// The graph below the seeds: how many edges lead into each node (`keep` holds them alive).
std::unordered_map<Node*, int> count_dependencies(const Seeds& seeds,
                                                  std::unordered_map<Node*, std::shared_ptr<Node>>& keep) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (auto& [e, g] : seeds)
    if (keep.emplace(e.fn.get(), e.fn).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (keep.emplace(e.fn.get(), e.fn).second) stack.push_back(e.fn.get());
    }
  }
  return deps;
}

// grad(): a leaf's gradient goes to its input slot (or is an error under only_inputs).
void capture_leaf(Capture& capture, Node* n, const std::vector<Tensor>& in) {
  auto it = capture.slot.find(n);
  if (it != capture.slot.end()) {
    if (in[0].defined()) accumulate(capture.grads[it->second], in[0]);
    return;
  }
  BOOSTER_CHECK_T(AutogradError, !capture.only_inputs || !in[0].defined(), "grad: the backward reached ",
                  Tensor(static_cast<AccumulateGrad*>(n)->leaf()).describe(),
                  ", a tensor that requires grad but is not among the inputs, so its gradient would be lost");
}

// Runs node n on its incoming gradients (timed under the profiler; its saved tensors freed
// unless retain_graph) and returns one gradient per input; row-sparse ones go to `rows`.
std::vector<Tensor> apply_node(Node* n, std::vector<Tensor> in, bool retain_graph, std::vector<RowGradient>& rows) {
  struct Collect {  // add_rows_to_gradient's target while n runs (a nested backward has its own)
    std::vector<RowGradient>* prev = t_row_gradients;
    explicit Collect(std::vector<RowGradient>& r) { t_row_gradients = &r; }
    ~Collect() { t_row_gradients = prev; }
  } collect(rows);
  for (size_t k = 0; k < n->retained.size(); ++k) {
    // The buffer also flows on into the node, so it is never taken: add_to_grad copies.
    if (auto impl = n->retained[k].lock(); impl && in[k].defined()) add_to_grad(*impl, in[k]);
  }
  std::vector<Tensor> out;
  if (Profiler::enabled() && n->timed) {
    const std::string label = n->name() + " bwd";
    auto t0 = std::chrono::steady_clock::now();
    out = n->apply(std::move(in));
    Profiler::add(label.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } else {
    out = n->apply(std::move(in));
  }
  if (!retain_graph) n->release();
  BOOSTER_CHECK_T(AutogradError, out.size() == n->next_edges.size() || n->next_edges.empty(), "backward of '",
                  n->name(), "' returned ", out.size(), " gradients for ", n->next_edges.size(), " inputs");
  return out;
}

using ReadyQueue = std::priority_queue<Node*, std::vector<Node*>, ByNewest>;

// Adds rows into a gradient buffer: in place where the buffer is the engine's own, onto zeros
// of the input's shape and dtype where there is none yet.
void accumulate_rows(Tensor& slot, const InputMeta& m, const RowGradient& r) {
  if (!slot.defined()) slot = Tensor::zeros(m.shape, m.dtype);
  else if (!slot.is_contiguous() || !slot.is_sole_owner()) slot = slot.contiguous().clone();
  kernels::add_rows_(slot, r.indices, r.rows);
}

// Adds node n's output gradients into the buffers of the nodes they lead to (checked against
// the inputs' shapes, cast to their dtypes); a node whose last dependency this was is ready.
void pass_on(Node* n, const std::vector<Tensor>& out, const std::vector<RowGradient>& rows,
             std::unordered_map<Node*, std::vector<Tensor>>& buffers, std::unordered_map<Node*, int>& deps,
             ReadyQueue& ready) {
  for (size_t i = 0; i < n->next_edges.size(); ++i) {
    const Edge& e = n->next_edges[i];
    if (!e.fn) continue;
    Node* next = e.fn.get();
    const InputMeta& m = n->input_meta[i];
    if (out[i].defined()) {
      BOOSTER_CHECK_T(ShapeError, out[i].shape() == m.shape, "backward of '", n->name(), "': gradient for input ", i,
                      " has shape ", shape_str(out[i].shape()), ", the input has shape ", shape_str(m.shape));
      Tensor g = out[i].dtype() == m.dtype ? out[i] : out[i].to(m.dtype);
      auto& buf = buffers[next];
      buf.resize(size_t(next->num_outputs));
      accumulate(buf[size_t(e.input_nr)], g);
    }
    for (const RowGradient& r : rows) {
      if (r.input != i) continue;
      BOOSTER_CHECK_T(ShapeError, m.shape.size() == 2 && r.rows.dim() == 2 && r.rows.size(1) == m.shape[1],
                      "backward of '", n->name(), "': rows ", shape_str(r.rows.shape()), " for input ", i, " of shape ",
                      shape_str(m.shape));
      auto& buf = buffers[next];
      buf.resize(size_t(next->num_outputs));
      accumulate_rows(buf[size_t(e.input_nr)], m, r);
    }
    if (--deps[next] == 0) ready.push(next);
  }
}

void run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
               Capture* capture) {
  NoGradGuard no_grad;
  struct Retaining {  // retaining_graph() for the nodes this backward runs
    bool prev = t_retaining;
    explicit Retaining(bool on) { t_retaining = on; }
    ~Retaining() { t_retaining = prev; }
  } retaining(retain_graph);
  g_backward_pass.fetch_add(1, std::memory_order_relaxed);

  const Seeds seeds = seed_edges(roots, grads);
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;
  std::unordered_map<Node*, int> deps = count_dependencies(seeds, keep);
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  for (auto& [e, g] : seeds) {
    auto& buf = buffers[e.fn.get()];
    buf.resize(size_t(e.fn->num_outputs));
    accumulate(buf[size_t(e.input_nr)], g);
  }
  ReadyQueue ready;
  for (auto& [e, g] : seeds)
    if (deps[e.fn.get()] == 0) ready.push(e.fn.get());
  std::unordered_map<Node*, bool> done;
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    if (done[n]) continue;
    done[n] = true;
    std::vector<Tensor> in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(size_t(n->num_outputs));
    if (capture && dynamic_cast<AccumulateGrad*>(n)) {
      capture_leaf(*capture, n, in);
      continue;
    }
    std::vector<RowGradient> rows;
    const std::vector<Tensor> out = apply_node(n, std::move(in), retain_graph, rows);
    pass_on(n, out, rows, buffers, deps, ready);
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  run_backward(roots, grads, retain_graph, nullptr);
}

void accumulate_into_leaves(std::vector<std::pair<Tensor, Tensor>> grads) {
  BackwardScope scope;
  NoGradGuard no_grad;
  g_backward_pass.fetch_add(1, std::memory_order_relaxed);
  for (auto& [leaf, g] : grads) {
    if (!g.defined()) continue;
    BOOSTER_CHECK_T(AutogradError, leaf.defined() && leaf.requires_grad() && !leaf.impl()->grad_fn,
                    "accumulate_into_leaves: ", leaf.defined() ? leaf.describe() : std::string("(undefined)"),
                    " is not a leaf that requires grad");
    BOOSTER_CHECK_T(ShapeError, g.shape() == leaf.shape(), "accumulate_into_leaves: a gradient of shape ",
                    shape_str(g.shape()), " for ", leaf.describe());
    const std::shared_ptr<Node> acc = gradient_edge(leaf).fn;
    acc->apply({std::move(g)});  // its buffer adopted as .grad where nothing else holds it
  }
  scope.finish();
}

bool retaining_graph() { return t_retaining; }

bool in_backward() { return t_depth > 0; }

void queue_callback(std::function<void()> fn) {
  BOOSTER_CHECK_T(AutogradError, t_depth > 0, "queue_callback: no backward is running on this thread (a callback "
                  "runs at the end of one; queue it from a hook or a node's backward)");
  BOOSTER_CHECK(fn != nullptr, "queue_callback: the callback is empty");
  t_callbacks.push_back(std::move(fn));
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph, bool only_inputs) {
  Capture capture;
  capture.only_inputs = only_inputs;
  std::vector<std::shared_ptr<Node>> accumulators;  // alive until the backward has run
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    BOOSTER_CHECK_T(AutogradError, t.defined() && t.requires_grad() && !t.impl()->grad_fn, "grad: input ", i, " ",
                    t.defined() ? t.describe() : std::string("(undefined)"), " is not a leaf that requires grad");
    accumulators.push_back(gradient_edge(t).fn);
    BOOSTER_CHECK_T(AutogradError, capture.slot.emplace(accumulators.back().get(), i).second, "grad: input ", i,
                    " is given twice");
  }
  capture.grads.resize(inputs.size());
  StoreWeightGrads at_once(nullptr);  // the caller reads the gradients this returns: none deferred
  run_backward(roots, grads, retain_graph, &capture);
  return std::move(capture.grads);
}

}  // namespace booster::autograd
