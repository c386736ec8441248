// Point-to-point messages between pipeline stages (see p2p.h).
#include "pipeline/p2p.h"

#include <sstream>

#include "core/autograd/grad_mode.h"
#include "core/common/check.h"

namespace booster::pipeline {

namespace {
enum Kind { kMetaSize = 1, kMetaBytes = 2, kActivation = 3, kGradient = 4 };
}  // namespace

bool carries_grad(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.requires_grad(); }

PipelineP2P::PipelineP2P(const PipelineStageManager& stages, bool metadata_cache)
    : sm_(stages), cache_(metadata_cache) {}

int PipelineP2P::tag(int kind, int chunk, size_t index) const {
  BOOSTER_CHECK(index < 64, "pipeline p2p: a stage sends at most 64 tensors, got ", index + 1);
  return kind * 4096 + chunk * 64 + int(index);
}

std::string PipelineP2P::encode(const Meta& m) {
  std::ostringstream os;
  for (size_t i = 0; i < m.keys.size(); ++i) {
    os << m.keys[i] << '\t' << int(m.dtypes[i]) << '\t' << int(m.requires_grad[i]) << '\t' << m.shapes[i].size();
    for (int64_t d : m.shapes[i]) os << '\t' << d;
    os << '\n';
  }
  return os.str();
}

PipelineP2P::Meta PipelineP2P::decode(const std::string& s) {
  Meta m;
  std::istringstream is(s);
  std::string line;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    std::string key;
    int dt = 0, rg = 0;
    size_t nd = 0;
    std::getline(ls, key, '\t');
    ls >> dt >> rg >> nd;
    Shape sh(nd);
    for (auto& d : sh) ls >> d;
    BOOSTER_CHECK_T(BackendError, !ls.fail(), "pipeline p2p: corrupt metadata message '", line, "'");
    m.keys.push_back(key), m.dtypes.push_back(DType(dt)), m.requires_grad.push_back(rg != 0), m.shapes.push_back(sh);
  }
  return m;
}

void PipelineP2P::send_forward(const TensorMap& outputs, int chunk, int64_t key) {
  const int to_slot = sm_.slot_of(chunk) + 1, to = sm_.rank_of_slot(to_slot), to_chunk = sm_.chunk_of_slot(to_slot);
  Meta m;
  for (auto& [k, t] : outputs) {
    BOOSTER_CHECK(t.defined(), "pipeline stage ", sm_.stage(), ": output '", k, "' is undefined");
    m.keys.push_back(k), m.dtypes.push_back(t.dtype()), m.shapes.push_back(t.shape());
    m.requires_grad.push_back(carries_grad(t));
  }
  const std::string meta = encode(m);
  auto it = sent_meta_.find(to_slot);  // by slot: in the V one stage sends to chunk 1 of two stages
  const bool resend = !cache_ || it == sent_meta_.end() || it->second.first != key;
  if (!resend)
    BOOSTER_CHECK(it->second.second == meta, "pipeline stage ", sm_.stage(), ": what it sends changed shape or dtype "
                  "within micro-batches of the same size (was\n", it->second.second, "now\n", meta,
                  "); set enable_metadata_cache = false for such a model");
  const auto& g = sm_.group();
  if (resend) {
    sent_meta_[to_slot] = {key, meta};
    Tensor bytes = Tensor::empty({int64_t(meta.size())}, DType::u8);
    std::copy(meta.begin(), meta.end(), bytes.data<uint8_t>());
    sends_.push_back(dist::send(Tensor::from_ints({int64_t(meta.size())}, {1}), to, tag(kMetaSize, to_chunk), g, true));
    sends_.push_back(dist::send(bytes, to, tag(kMetaBytes, to_chunk), g, true));
  }
  size_t i = 0;
  for (auto& [k, t] : outputs)
    sends_.push_back(dist::send(t.detach().contiguous(), to, tag(kActivation, to_chunk, i++), g, true));
}

bool PipelineP2P::forward_meta_cached(int chunk, int64_t key) const {
  auto it = recv_meta_.find(chunk);
  return cache_ && it != recv_meta_.end() && it->second.first == key;
}

PendingRecv PipelineP2P::post_recv_forward(int chunk, int64_t key) {
  const auto& g = sm_.group();
  const int from = sm_.rank_of_slot(sm_.slot_of(chunk) - 1);
  auto it = recv_meta_.find(chunk);
  if (!cache_ || it == recv_meta_.end() || it->second.first != key) {
    Tensor n = Tensor::empty({1}, DType::i64);
    dist::recv(n, from, tag(kMetaSize, chunk), g);
    Tensor bytes = Tensor::empty({n.data<int64_t>()[0]}, DType::u8);
    dist::recv(bytes, from, tag(kMetaBytes, chunk), g);
    recv_meta_[chunk] = {key, decode(std::string(reinterpret_cast<const char*>(bytes.data<uint8_t>()), size_t(bytes.numel())))};
    it = recv_meta_.find(chunk);
  }
  const Meta& m = it->second.second;
  PendingRecv r;
  for (size_t i = 0; i < m.keys.size(); ++i) {
    Tensor t = Tensor::empty(m.shapes[i], m.dtypes[i]);
    if (m.requires_grad[i]) r.grad_keys.push_back(m.keys[i]);
    r.work.push_back(dist::recv(t, from, tag(kActivation, chunk, i), g, true));
    r.tensors[m.keys[i]] = t;
  }
  BOOSTER_CHECK(!r.tensors.empty(), "pipeline stage ", sm_.stage(), ": the previous stage sends nothing");
  return r;
}

void PipelineP2P::send_backward(const TensorMap& input_grads, int chunk) {
  const int to_slot = sm_.slot_of(chunk) - 1, to = sm_.rank_of_slot(to_slot), to_chunk = sm_.chunk_of_slot(to_slot);
  size_t i = 0;
  for (auto& [k, g] : input_grads)
    sends_.push_back(dist::send(g.detach().contiguous(), to, tag(kGradient, to_chunk, i++), sm_.group(), true));
}

PendingRecv PipelineP2P::post_recv_backward(int chunk, const TensorMap& outputs) {
  PendingRecv r;
  const int from = sm_.rank_of_slot(sm_.slot_of(chunk) + 1);
  size_t i = 0;
  for (auto& [k, t] : outputs) {
    if (!carries_grad(t)) continue;
    Tensor g = Tensor::empty(t.shape(), t.dtype());
    r.work.push_back(dist::recv(g, from, tag(kGradient, chunk, i++), sm_.group(), true));
    r.tensors[k] = g;
  }
  return r;
}

TensorMap PipelineP2P::wait(PendingRecv& r, bool requires_grad) {
  for (auto& w : r.work) w->wait();
  r.work.clear();
  TensorMap out = std::move(r.tensors);
  r.tensors.clear();
  if (requires_grad)
    for (auto& k : r.grad_keys) out.at(k).requires_grad_(true);
  return out;
}

void PipelineP2P::progress() {
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(), [](const dist::WorkPtr& w) { return w->test(); }),
               sends_.end());
}

void PipelineP2P::wait_sends() {
  for (auto& w : sends_) w->wait();
  sends_.clear();
}

}  // namespace booster::pipeline
