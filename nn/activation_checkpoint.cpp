// Activation checkpointing (see checkpoint.h).
#include "nn/activation_checkpoint.h"

#include <algorithm>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"

namespace booster::nn {

namespace {

// Turns grad mode on for its lifetime (backward runs its nodes with it off).
class EnableGrad {
 public:
  EnableGrad() : prev_(autograd::GradMode::enabled()) { autograd::GradMode::set_enabled(true); }
  ~EnableGrad() { autograd::GradMode::set_enabled(prev_); }
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool prev_;
};

// The generators m's modules own (TPDropout's), each once.
std::vector<std::shared_ptr<Generator>> owned_generators(const Module& m) {
  std::vector<std::shared_ptr<Generator>> out;
  for (auto& [path, sub] : m.named_modules())
    if (auto* r = dynamic_cast<const RandomModule*>(sub.get()))
      for (auto& g : r->generators())
        if (g && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  return out;
}

// What the recomputation needs: the module, its input, the generators' states at the forward.
struct Saved {
  std::shared_ptr<Module> module;
  Tensor input;
  bool input_grad = false;
  std::vector<Tensor> params;
  GeneratorState default_state;
  std::vector<std::shared_ptr<Generator>> owned;
  std::vector<GeneratorState> owned_states;
  std::weak_ptr<autograd::Node> node;
};

std::vector<Tensor> recompute_backward(const Saved& s, const Tensor& grad_out) {
  // The forward's draws again: the default generator from its saved state (whichever object
  // is the default on this thread now), the module's own ones set back and restored after.
  Generator replay(s.default_state.seed, s.default_state.stream);
  replay.set_state(s.default_state);
  DefaultGeneratorGuard use_replay(replay);
  std::vector<GeneratorState> now;
  for (size_t i = 0; i < s.owned.size(); ++i) {
    now.push_back(s.owned[i]->state());
    s.owned[i]->set_state(s.owned_states[i]);
  }
  struct Restore {
    const Saved& s;
    const std::vector<GeneratorState>& now;
    ~Restore() {
      for (size_t i = 0; i < now.size(); ++i) s.owned[i]->set_state(now[i]);
    }
  } restore{s, now};
  EnableGrad grad_on;
  Tensor x = s.input.detach();
  if (s.input_grad) x.requires_grad_(true);
  Tensor out = (*static_cast<UnaryModule*>(s.module.get()))(x);
  std::vector<Tensor> wrt;
  if (s.input_grad) wrt.push_back(x);
  for (const Tensor& p : s.params) wrt.push_back(p);
  std::vector<Tensor> g = autograd::grad({out}, {grad_out}, wrt);
  std::vector<Tensor> result;
  result.push_back(s.input_grad ? g.front() : Tensor());
  result.insert(result.end(), g.begin() + (s.input_grad ? 1 : 0), g.end());
  // A parameter ZeRO-3 released after the forward ([0]) is whole again now: its gradient is
  // checked against the shape it has now.
  if (auto node = s.node.lock())
    for (size_t k = 0; k < s.params.size(); ++k) node->input_meta[1 + k] = {s.params[k].shape(), s.params[k].dtype()};
  return result;
}

}  // namespace

Tensor checkpoint(UnaryModule& m, const Tensor& x) {
  if (!autograd::GradMode::enabled()) return m(x);
  auto s = std::make_shared<Saved>();
  s->module = m.shared_from_this();
  s->input = x.detach();
  s->input_grad = x.requires_grad();
  for (const Tensor& p : m.parameters())
    if (p.defined() && p.requires_grad()) s->params.push_back(p);
  s->default_state = default_generator().state();
  s->owned = owned_generators(m);
  for (auto& g : s->owned) s->owned_states.push_back(g->state());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = m(x);
  }
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), s->params.begin(), s->params.end());
  out = autograd::record("checkpoint", inputs, out, [s](const std::vector<Tensor>& g) {
    return recompute_backward(*s, g.front());
  });
  if (out.impl()->grad_fn) s->node = out.impl()->grad_fn;
  return out;
}

Tensor run_layers(const ModuleList<UnaryModule>& layers, const Tensor& x, int64_t begin, int64_t end, bool enabled,
                  double ratio, bool training, const char* who) {
  BOOSTER_CHECK(0 <= begin && begin <= end && end <= int64_t(layers.size()), who, ": layers [", begin, ", ", end, ") of ",
                layers.size());
  BOOSTER_CHECK(ratio >= 0 && ratio <= 1, who, ": gradient_checkpointing_ratio must be in [0, 1], got ", ratio);
  const int64_t ckpt = enabled && training ? int64_t(ratio * double(end - begin) + 1e-9) : 0;
  Tensor h = x;
  for (int64_t i = begin; i < end; ++i) h = i - begin < ckpt ? checkpoint(*layers.at(size_t(i)), h) : layers.at(size_t(i))(h);
  return h;
}

}  // namespace booster::nn
