// galvatron_profile_model: profiles a ViT preset, or the GPT-2 / LLaMA model of an lm_train
// run config (--config: its vocabulary, block, widths and dropout), on this machine as
// Galvatron's profile_model does (its computation and memory files), under mpirun with the ranks the
// tensor-parallel degrees need: for every degree t = 1, 2, ..., W that divides the heads,
// the model is boosted under GalvatronPlugin's global mode at layernum_min and layernum_max
// layers; the difference of the forward times per sample is a layer's forward at t (its
// tensor-parallel traffic included), the difference of what a forward keeps for backward its
// activations, and a checkpointed run gives a checkpointed layer's; for every t > 1 the same
// under Ulysses of degree t (use_ulysses). What is left at
// layernum_min is the embeddings' and head's, and a first pipeline stage run without layers
// gives the embeddings' share of it (a pipeline's first stage holds them, its last the head);
// a training step's allocator peak at layernum_min, less what the cost model counts for it,
// is the runtime's own memory. The largest degree the heads allow is written as max_tp_deg,
// the search's cap. ZeRO-3's cost is DDP and ZeRO-3 steps run in turn. Every timing is taken
// --rounds times in turn; the files hold medians.
//   mpirun -np 4 galvatron_profile_model --model vit-small --image-size 224 --batch 8 --precision bf16 --out profiles/
//   mpirun -np 2 galvatron_profile_model --config examples/lm/configs/shakespeare_char.toml --batch 6 --out profiles/
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>

#include "booster/booster.h"
#include "booster/grad_sync.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tensor/allocator.h"
#include "lm_setup.h"
#include "nn/pipeline.h"
#include "nn/vit.h"
#include "core/kernels/ops.h"
#include "optim/adam.h"
#include "galvatron/cost_model.h"
#include "plugins/galvatron/galvatron_plugin.h"

using namespace booster;
using Clock = std::chrono::steady_clock;
namespace gv = booster::galvatron;

namespace {

struct Args {
  std::string model = "vit-small", precision = "bf16", out = "galvatron_profiles";
  std::string config;                 // an lm_train run config: its language model instead of a ViT preset
  std::vector<std::string> overrides;  // --set on it
  int64_t image_size = 224, batch = 8, layers_min = 1, layers_max = 3;
  int iters = 5;
  int rounds = 3;
  bool sequence_parallel = false;  // Megatron-SP in the tensor-parallel runs
};

struct Measure {
  double fwd_ms = 0;       // a forward of this rank's rows (no grad)
  double fwd_bwd_ms = 0;   // a forward and backward (no gradient sync: under no_sync)
  double opt_ms = 0;       // an optimizer step
  double opt_extra_mb = 0; // what the step allocates beyond what it started with, at most
  double act_mb = 0;       // what a forward with grad keeps
  double peak_mb = 0;      // a training step's allocator peak
};

std::shared_ptr<Plugin> galvatron(const Args& a, int tp, bool checkpoint, bool sdp, bool sp) {
  plugins::GalvatronOptions o;
  o.global_tp_deg = tp;
  o.use_ulysses = sp;
  o.sequence_parallel = a.sequence_parallel;
  o.global_checkpoint = checkpoint;
  o.sdp = sdp;
  o.mixed_precision = a.precision;
  return std::make_shared<plugins::GalvatronPlugin>(o);
}

// The profiled model: a ViT preset (images), or a run config's language model (tokens).
struct Family {
  std::function<std::shared_ptr<nn::Module>(int64_t layers)> make;
  std::string input_key;  // what the first stage reads: pixel_values or input_ids
  std::function<TensorMap(int64_t rows)> batch;  // this rank's rows, with their labels
  int64_t seq = 0, hidden = 0, heads = 0;  // heads: what a tensor-parallel degree must divide
};

Family vit_family(const Args& a) {
  Family f;
  nn::ViTConfig c = nn::ViTConfig::preset(a.model);
  c.image_size = a.image_size;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  f.make = [c](int64_t layers) {
    nn::ViTConfig one = c;
    one.num_hidden_layers = layers;
    return std::shared_ptr<nn::Module>(std::make_shared<nn::ViTForImageClassification>(one));
  };
  f.input_key = "pixel_values";
  f.batch = [c](int64_t rows) {
    Tensor x = Tensor::empty({rows, c.num_channels, c.image_size, c.image_size});
    Generator(3).normal_(x);
    return TensorMap{{"pixel_values", x}, {"labels", Tensor::zeros({rows}, DType::i64)}};
  };
  f.seq = c.num_patches() + 1, f.hidden = c.hidden_size, f.heads = c.num_attention_heads;
  return f;
}

// lm_train's model of the config (lm_train's schema: a wrong key refused as there), at any depth.
Family lm_family(const Args& a) {
  Config cfg = Config::from_file(a.config, a.overrides);
  cfg.apply(examples::lm_train_schema());
  cfg.set("model.gradient_checkpointing=false");  // the profile measures layers with and without it
  const examples::LmModel whole = examples::lm_run_model(cfg);
  const int64_t vocab = whole.lm->vocab_size(), block = cfg.get_int("train.block_size");
  const std::string depth = whole.family == "llama" ? "model.num_hidden_layers" : "model.n_layer";
  Family f;
  f.make = [cfg, depth](int64_t layers) {
    Config c = cfg;
    c.set(depth + "=" + std::to_string(layers));
    return examples::lm_run_model(c).module;
  };
  f.input_key = "input_ids";
  f.batch = [vocab, block](int64_t rows) {
    Tensor ids = Tensor::empty({rows, block + 1});
    Generator(3).uniform_(ids, 0, double(vocab));
    ids = ids.to(DType::i64);
    return TensorMap{{"input_ids", ids.narrow(1, 0, block).contiguous()}, {"labels", ids.narrow(1, 1, block).contiguous()}};
  };
  f.seq = block;
  if (auto* g = dynamic_cast<nn::GPT2LMHeadModel*>(whole.module.get())) {
    f.hidden = g->config().n_embd, f.heads = g->config().n_head;
  } else {
    const auto& l = dynamic_cast<nn::LlamaForCausalLM&>(*whole.module).config();
    f.hidden = l.hidden_size, f.heads = std::gcd(l.num_attention_heads, l.kv_heads());  // both split over the group
  }
  return f;
}

// The loss of a forward: the model's own (a head fused with it), a language model's token
// loss of its logits, or an image classifier's cross entropy.
Tensor loss_of(nn::Module& m, const TensorMap& out, const TensorMap& batch) {
  if (auto l = out.find("loss"); l != out.end()) return l->second;
  if (auto* lm = dynamic_cast<nn::CausalLM*>(&m)) return lm->token_loss(out.at("logits"), batch.at("labels"));
  return cross_entropy(out.at("logits"), batch.at("labels"));
}

// The model of `layers` layers boosted under a global plan, and a batch of this rank's rows.
struct Setup {
  std::shared_ptr<nn::Module> module;  // the boosted model's own
  std::unique_ptr<Booster> booster;
  BoostResult<nn::Module> r;
  TensorMap batch;
  TensorMap forward() { return r.model->forward_named(batch); }
  /// A forward and backward, the gradients synchronized as a step does.
  void train_step() {
    r.optimizer->zero_grad();
    booster->backward(loss_of(*module, forward(), batch), *r.optimizer);
  }
};

Setup setup(const Args& a, const Family& f, int64_t layers, int tp, bool checkpoint, bool sdp, bool sp = false) {
  manual_seed(7);
  Setup st;
  st.module = f.make(layers);
  st.booster = std::make_unique<Booster>(galvatron(a, tp, checkpoint, sdp, sp));
  st.r = st.booster->boost(st.module, std::make_shared<optim::AdamW>(st.module->named_parameters()));
  st.batch = f.batch(a.batch);
  return st;
}

// What ZeRO-3 adds to a training step of `layers` layers over DDP (its gathers beside its
// reduce-scatter, against the all-reduce; each less its wait at the backward's end), the
// two run in turn so that a drift of the machine's speed falls on both alike.
double zero3_extra_ms(const Args& a, const Family& f, int64_t layers) {
  Setup ddp = setup(a, f, layers, 1, false, false), z3 = setup(a, f, layers, 1, false, true);
  double sum = 0;
  for (int i = -1; i < a.iters; ++i) {  // the first pair warms up
    double ms[2];
    for (int k = 0; k < 2; ++k) {
      Setup& st = k ? z3 : ddp;
      GradSync* sync = st.r.model->grad_sync();
      sync->reset_wait_seconds();
      dist::barrier();
      const auto t0 = Clock::now();
      st.train_step();
      ms[k] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() - sync->wait_seconds() * 1e3;
    }
    if (i >= 0) sum += ms[1] - ms[0];
  }
  return dist::all_reduce_scalar(sum / a.iters, dist::ReduceOp::max);
}

Measure run(const Args& a, const Family& f, int64_t layers, int tp, bool checkpoint, bool sp = false) {
  Setup st = setup(a, f, layers, tp, checkpoint, false, sp);
  auto& r = st.r;
  Booster& booster = *st.booster;
  Measure m;
  for (int s = 0; s < 3; ++s) {  // training steps; the third's peak (the optimizer's states exist from the first)
    if (s == 2) host_tier().reset_peak();
    st.train_step();
    dist::barrier();
    m.peak_mb = std::max(m.peak_mb, double(host_tier().peak_bytes()) / (1 << 20));
    const size_t before_step = host_tier().bytes_in_use();
    host_tier().reset_peak();
    r.optimizer->step();
    m.opt_extra_mb = double(host_tier().peak_bytes() - before_step) / (1 << 20);
    if (s == 2) m.peak_mb = std::max(m.peak_mb, double(host_tier().peak_bytes()) / (1 << 20));
    else m.peak_mb = 0;
  }
  {  // the optimizer alone, its states made: the mean of `iters` steps on the last gradients
    const auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) r.optimizer->step();
    m.opt_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / a.iters;
  }
  {
    // Compute alone: the gradient reduction deferred (the cost model prices it from the
    // hardware profile).
    DeferredSync defer(r.model->grad_sync());
    dist::barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) booster.backward(loss_of(*st.module, st.forward(), st.batch), *r.optimizer);
    m.fwd_bwd_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / a.iters;
  }
  r.optimizer->zero_grad();
  {
    NoGradGuard ng;
    loss_of(*st.module, st.forward(), st.batch);
    dist::barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) loss_of(*st.module, st.forward(), st.batch);
    m.fwd_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / a.iters;
  }
  r.optimizer->zero_grad();
  const size_t before = host_tier().bytes_in_use();
  {
    Tensor loss = loss_of(*st.module, st.forward(), st.batch);
    m.act_mb = double(host_tier().bytes_in_use() - before) / (1 << 20);
  }
  m.fwd_ms = dist::all_reduce_scalar(m.fwd_ms, dist::ReduceOp::max);
  m.fwd_bwd_ms = dist::all_reduce_scalar(m.fwd_bwd_ms, dist::ReduceOp::max);
  m.opt_ms = dist::all_reduce_scalar(m.opt_ms, dist::ReduceOp::max);
  m.opt_extra_mb = dist::all_reduce_scalar(m.opt_extra_mb, dist::ReduceOp::max);
  m.act_mb = dist::all_reduce_scalar(m.act_mb, dist::ReduceOp::max);
  m.peak_mb = dist::all_reduce_scalar(m.peak_mb, dist::ReduceOp::max);
  return m;
}

// The embeddings' shares of what the layers leave (the embeddings and the head) in
// activations and forward time: a pipeline's first stage alone, without layers, at tp 1,
// against the embeddings' and head's figures already in p.
void embeddings_share(const Args& a, const Family& f, gv::ModelProfile& p) {
  Setup st = setup(a, f, a.layers_min, 1, false, false);
  const TensorMap in{{f.input_key, st.r.model->cast_input(st.batch.at(f.input_key))}};
  auto& pm = dynamic_cast<nn::PipelineModule&>(*st.module);
  const nn::StageSpec first{0, 0, true, false};
  double act_mb = 0, fwd_ms = 0;
  {
    const size_t before = host_tier().bytes_in_use();
    auto out = pm.stage_forward(in, first);
    act_mb = double(host_tier().bytes_in_use() - before) / (1 << 20);
  }
  {
    NoGradGuard ng;
    pm.stage_forward(in, first);
    const auto t0 = Clock::now();
    for (int i = 0; i < a.iters; ++i) pm.stage_forward(in, first);
    fwd_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / a.iters;
  }
  act_mb = dist::all_reduce_scalar(act_mb, dist::ReduceOp::max) / double(a.batch);
  fwd_ms = dist::all_reduce_scalar(fwd_ms, dist::ReduceOp::max) / double(a.batch);
  auto ratio = [](double part, double whole) { return whole > 0 ? std::clamp(part / whole, 0.0, 1.0) : 0.5; };
  p.embed_act_share = ratio(act_mb, p.other_act_mb_per_sample);
  p.embed_time_share = ratio(fwd_ms, p.other_fwd_ms_per_sample);
}

// What the cost model does not count at layernum_min under DDP at tp 1 is the runtime's own
// memory; what a checkpointed step's peak holds beyond the rest of its backward (the other
// layers' inputs and gradients) is a checkpointed layer's recompute and backward.
void calibrate_memory(gv::ModelProfile& p, const Args& a, const Measure& base, const Measure& clo) {
  const int w = dist::world_size();
  gv::HybridPlan plan;
  plan.layers.assign(size_t(a.layers_min), gv::LayerStrategy{});
  plan.global_bsz = a.batch * w;
  gv::HardwareProfile none;  // memory only: communication costs nothing here
  none.p2p_bw[1] = 1e12;
  for (int n = 2; n <= w; n *= 2) none.allreduce_busbw["allreduce_size_" + std::to_string(n) + "_consec_1"] = 1e12;
  const gv::CostModel cm(none, p, w, a.precision);
  p.runtime_mb = base.peak_mb - cm.cost(plan).memory_mb;
  // The model's backward peak is the first layer's recompute beside the rest once that
  // recompute is large: linear in it there, C + x * batch. x is what makes it the measured peak.
  for (auto& l : plan.layers) l.checkpoint = true;
  const double large = 1e4;  // MB a sample
  p.checkpoint_backward_mb_per_sample = large;
  const double rest = gv::CostModel(none, p, w, a.precision).cost(plan).stages.at(0).backward_mb - large * a.batch;
  p.checkpoint_backward_mb_per_sample = std::max(1e-9, (clo.peak_mb - rest) / double(a.batch));
}

// One round of every measurement into p (its parameter counts and shapes already set).
void profile_round(const Args& a, const Family& f, gv::ModelProfile& p) {
  const int w = dist::world_size();
  const double dl = double(a.layers_max - a.layers_min);
  Measure base;
  for (int t = 1; t <= w && t <= p.max_tp; t *= 2) {
    const Measure lo = run(a, f, a.layers_min, t, false), hi = run(a, f, a.layers_max, t, false);
    const double rows = double(a.batch * t);  // the embeddings' rows of a tensor-parallel group meet in its layers
    // A difference of two timings: a slow spell over the smaller model can make it negative.
    p.fwd_ms_per_sample[t] = std::max(0.0, (hi.fwd_ms - lo.fwd_ms) / dl / rows);
    p.fwd_bwd_ms_per_sample[t] = std::max(0.0, (hi.fwd_bwd_ms - lo.fwd_bwd_ms) / dl / rows);
    if (t == 1) {  // the parameters are whole on every rank (DDP)
      p.optimizer_ms_per_param = std::max(0.0, (hi.opt_ms - lo.opt_ms) / dl / p.param_count);
      p.optimizer_mb_per_param = std::max(0.0, (hi.opt_extra_mb - lo.opt_extra_mb) / dl / p.param_count);
    }
    p.act_mb_per_sample[t] = (hi.act_mb - lo.act_mb) / dl / rows;
    if (t == 1) base = lo;
    if (t > 1) {  // Ulysses over the same ranks: whole weights, each rank a share of the tokens
      const Measure slo = run(a, f, a.layers_min, t, false, true), shi = run(a, f, a.layers_max, t, false, true);
      p.sp_fwd_ms_per_sample[t] = std::max(0.0, (shi.fwd_ms - slo.fwd_ms) / dl / rows);
      p.sp_fwd_bwd_ms_per_sample[t] = std::max(0.0, (shi.fwd_bwd_ms - slo.fwd_bwd_ms) / dl / rows);
      p.sp_act_mb_per_sample[t] = (shi.act_mb - slo.act_mb) / dl / rows;
    }
  }
  const Measure clo = run(a, f, a.layers_min, 1, true), chi = run(a, f, a.layers_max, 1, true);
  if (w > 1) {  // ZeRO-3: what a layer's gathers (forward and backward) and releases add to its step, over the world
    p.zero3_ms_per_layer = std::max(0.0, (zero3_extra_ms(a, f, a.layers_max) - zero3_extra_ms(a, f, a.layers_min)) / dl);
    p.zero3_group = w;
  }
  p.checkpoint_act_mb_per_sample = (chi.act_mb - clo.act_mb) / dl / double(a.batch);
  p.other_fwd_ms_per_sample = std::max(0.0, base.fwd_ms / double(a.batch) - double(a.layers_min) * p.fwd_ms_per_sample[1]);
  p.other_fwd_bwd_ms_per_sample =
      std::max(0.0, base.fwd_bwd_ms / double(a.batch) - double(a.layers_min) * p.fwd_bwd_ms_per_sample[1]);
  p.other_act_mb_per_sample = std::max(0.0, base.act_mb / double(a.batch) - double(a.layers_min) * p.act_mb_per_sample[1]);
  embeddings_share(a, f, p);
  calibrate_memory(p, a, base, clo);
}

// The median over rounds of every timed figure (memory does not vary) into rounds[0].
gv::ModelProfile median_of(std::vector<gv::ModelProfile> rounds) {
  auto median = [&](auto field) {
    std::vector<double> v;
    for (auto& r : rounds) v.push_back(field(r));
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
  };
  gv::ModelProfile p = rounds[0];
  for (auto& [t, x] : p.fwd_ms_per_sample) {
    x = median([t = t](gv::ModelProfile& r) { return r.fwd_ms_per_sample.at(t); });
    p.fwd_bwd_ms_per_sample[t] = median([t = t](gv::ModelProfile& r) { return r.fwd_bwd_ms_per_sample.at(t); });
  }
  for (auto& [n, x] : p.sp_fwd_ms_per_sample) {
    x = median([n = n](gv::ModelProfile& r) { return r.sp_fwd_ms_per_sample.at(n); });
    p.sp_fwd_bwd_ms_per_sample[n] = median([n = n](gv::ModelProfile& r) { return r.sp_fwd_bwd_ms_per_sample.at(n); });
  }
  p.other_fwd_ms_per_sample = median([](gv::ModelProfile& r) { return r.other_fwd_ms_per_sample; });
  p.other_fwd_bwd_ms_per_sample = median([](gv::ModelProfile& r) { return r.other_fwd_bwd_ms_per_sample; });
  p.optimizer_ms_per_param = median([](gv::ModelProfile& r) { return r.optimizer_ms_per_param; });
  p.zero3_ms_per_layer = median([](gv::ModelProfile& r) { return r.zero3_ms_per_layer; });
  p.embed_time_share = median([](gv::ModelProfile& r) { return r.embed_time_share; });
  return p;
}

}  // namespace

// A layer's parameters and the rest's (the embeddings' share of them), from a model of one layer.
void count_parameters(const Family& f, gv::ModelProfile& p) {
  const auto m = f.make(1);
  const double layer = double(nn::stage_parameter_count(*m, {0, 1, false, false}));
  const double all = double(nn::parameter_count(*m)) - layer, embed = double(nn::stage_parameter_count(*m, {0, 0, true, false}));
  p.param_count = layer, p.other_param_count = all, p.embed_param_share = embed / all;
}

int main(int argc, char** argv) {
  CLI::App app{"Profile a model's layers for Galvatron's search (a ViT preset, or an lm_train config's model)"};
  Args a;
  app.add_option("--model", a.model, "a ViT preset (vit-tiny, vit-small, vit-base, ...); with --config the "
                 "profile's name (default: the config's model.preset)");
  app.add_option("--config", a.config, "an lm_train run config: profile its GPT-2 or LLaMA model (vocabulary, "
                 "train.block_size, widths, dropout)");
  app.add_option("--set", a.overrides, "override a key of --config");
  app.add_option("--image-size", a.image_size);
  app.add_option("--batch", a.batch, "rows a rank feeds (the embeddings' share)");
  app.add_option("--precision", a.precision, "fp32, bf16 or fp16");
  app.add_option("--layers-min", a.layers_min, "layernum_min");
  app.add_option("--layers-max", a.layers_max, "layernum_max");
  app.add_option("--iters", a.iters, "timed forwards");
  app.add_option("--rounds", a.rounds, "rounds of every measurement; each timed figure is their median");
  app.add_option("--out", a.out, "folder of the profile files");
  app.add_flag("--sequence-parallel", a.sequence_parallel,
               "Megatron's sequence parallelism in the tensor-parallel layers (plans then run with sequence_parallel = true)");
  CLI11_PARSE(app, argc, argv);
  const bool named = app.count("--model") > 0;
  dist::launch_from_openmpi();
  BOOSTER_CHECK(a.layers_max > a.layers_min && a.layers_min >= 1, "--layers-max must exceed --layers-min >= 1");
  BOOSTER_CHECK(a.rounds >= 1 && a.iters >= 1, "--rounds and --iters must be at least 1");
  const int w = dist::world_size();
  const Family f = a.config.empty() ? vit_family(a) : lm_family(a);
  if (!a.config.empty() && !named) a.model = Config::from_file(a.config, a.overrides).get_string("model.preset");
  gv::ModelProfile p;
  p.model = a.model, p.precision = a.precision, p.profiled_batch = a.batch;
  p.sequence_parallel = a.sequence_parallel;
  p.hidden = f.hidden, p.seq = f.seq;
  // A layer splits its heads over its tensor-parallel group: the degrees (powers of two) that
  // divide them are the only ones profiled, and the profile tells the search so (ViT-Ti's 3
  // heads: tp 1).
  for (p.max_tp = 1; f.heads % (2 * p.max_tp) == 0;) p.max_tp *= 2;
  count_parameters(f, p);
  std::vector<gv::ModelProfile> rounds;
  for (int k = 0; k < a.rounds; ++k) {
    rounds.push_back(p);
    profile_round(a, f, rounds.back());
    if (dist::world_rank() == 0) {
      const auto& r = rounds.back();
      std::printf("round %d: forward and backward %.3f ms a sample a layer at tp 1", k + 1, r.fwd_bwd_ms_per_sample.at(1));
      if (r.fwd_bwd_ms_per_sample.count(2)) std::printf(", %.3f at tp 2", r.fwd_bwd_ms_per_sample.at(2));
      std::printf("; ZeRO-3 %.2f ms a layer\n", r.zero3_ms_per_layer);
    }
  }
  p = median_of(rounds);
  if (dist::world_rank() == 0)
    for (auto& [t, f] : p.fwd_ms_per_sample)
      std::printf("tp %d: forward %.3f ms, forward and backward %.3f ms a sample a layer, activations %.3f MB a sample "
                  "a layer\n", t, f, p.fwd_bwd_ms_per_sample.at(t), p.act_mb_per_sample.at(t));
  if (dist::world_rank() == 0)
    for (auto& [n, f] : p.sp_fwd_ms_per_sample)
      std::printf("Ulysses %d: forward %.3f ms, forward and backward %.3f ms a sample a layer, activations %.3f MB a "
                  "sample a layer\n", n, f, p.sp_fwd_bwd_ms_per_sample.at(n), p.sp_act_mb_per_sample.at(n));
  if (dist::world_rank() == 0 && w > 1)
    std::printf("ZeRO-3 over %d ranks: %.2f ms a layer a step for its gathers\n", w, p.zero3_ms_per_layer);
  if (dist::world_rank() == 0) {
    std::printf("checkpointed layer %.4f MB a sample; embeddings and head %.3f ms forward, %.3f ms with backward, "
                "%.3f MB a sample (the embeddings' share: %.2f of the parameters, %.2f of the activations, %.2f of "
                "the time); optimizer %.3f ns a parameter; runtime %.1f MB\n", p.checkpoint_act_mb_per_sample,
                p.other_fwd_ms_per_sample, p.other_fwd_bwd_ms_per_sample, p.other_act_mb_per_sample,
                p.embed_param_share, p.embed_act_share, p.embed_time_share,
                p.optimizer_ms_per_param * 1e6, p.runtime_mb);
    p.write(a.out);
    std::printf("wrote %s/{%s, %s}\n", a.out.c_str(), gv::ModelProfile::computation_file(a.precision, a.model).c_str(),
                gv::ModelProfile::memory_file(a.precision, a.model).c_str());
  }
  return 0;
}
