// The sharder and the policy registry (see policy.h).
#include "shardformer/policy.h"

#include "nn/lora.h"
#include "nn/parallel/dropout.h"

#include <mutex>

#include "shardformer/policies/causal_lm_policy.h"
#include "shardformer/policies/vit_policy.h"

namespace booster::shardformer {

const dist::ProcessGroup& ShardConfig::tp_group() const {
  BOOSTER_CHECK(tensor_parallel_process_group != nullptr, "ShardConfig: no tensor-parallel process group");
  return *tensor_parallel_process_group;
}

const dist::ProcessGroup& ShardConfig::sp_group() const {
  BOOSTER_CHECK(sequence_parallel_process_group != nullptr, "ShardConfig: no sequence-parallel process group");
  return *sequence_parallel_process_group;
}

std::shared_ptr<nn::SequenceSplit> ShardConfig::token_split() const {
  if (!enable_sequence_parallelism) return nullptr;
  auto s = std::make_shared<nn::SequenceSplit>();
  s->data_parallel = sp_axis();
  s->zigzag = ring_attn();
  s->group = s->data_parallel ? &sp_group() : &tp_group();
  return s;
}

namespace {
// A LoRA-adapted layer stays: its base is replaced as the policy says and the adapter is
// split to match it (its dropout drawing as the tp layers' do: alike over the group for a
// replicated input, per rank for a split one).
void adapt_lora(nn::LoraLinear& lora, const SubModuleReplacementDescription& sub, const ShardConfig& config,
                const std::string& path) {
  const std::string who = (path.empty() ? "" : path + ".") + sub.suffix;
  lora.replace("base_layer", sub.target_module(lora.base_layer.shared(), config));
  const bool split_input = lora.shard_like_base(config.tensor_parallel_process_group, who);
  if (dynamic_cast<nn::Dropout*>(lora.lora_dropout.get()) && config.tp_size() > 1) {
    auto gen = split_input ? config.parallel_generator : config.replicated_generator;
    if (gen) lora.replace("lora_dropout", nn::TPDropout::from_native_module(lora.lora_dropout.shared(), gen, split_input));
  }
}

void rewrite(nn::Module& model, const Policy& policy, const ShardConfig& config,
             const std::function<bool(const std::string&)>& select) {
  const auto table = policy.module_policy(model, config);
  // The modules to rewrite, listed before any replacement (a replaced child is not revisited).
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> todo;
  for (auto& [path, m] : model.named_modules())
    if (table.count(m->type_name()) && (!select || select(path))) todo.emplace_back(path, m);
  for (auto& [path, m] : todo) {
    const auto& desc = table.at(m->type_name());
    const std::string where = path.empty() ? "the model" : "'" + path + "'";
    for (auto& [attr, value] : desc.attribute_replacement) {
      try {
        m->set_attribute(attr, value);
      } catch (const Error& e) {
        BOOSTER_THROW(ValueError, policy.name(), ": attribute '", attr, "' of ", where, ": ", e.what());
      }
    }
    for (auto& sub : desc.sub_module_replacement) {
      std::shared_ptr<nn::Module> native;
      try {
        native = m->get(sub.suffix);
      } catch (const Error&) {
        if (sub.ignore_if_not_exist) continue;
        BOOSTER_THROW(ValueError, policy.name(), ": ", m->type_name(), " at ", where, " has no sub-module '",
                      sub.suffix, "' to replace");
      }
      try {
        if (auto lora = std::dynamic_pointer_cast<nn::LoraLinear>(native)) adapt_lora(*lora, sub, config, path);
        else m->replace(sub.suffix, sub.target_module(native, config));
      } catch (const Error& e) {
        BOOSTER_THROW(ValueError, policy.name(), ": replacing '", (path.empty() ? "" : path + "."), sub.suffix,
                      "': ", e.what());
      }
    }
  }
}
}  // namespace

void shard_model(nn::Module& model, const Policy& policy, const ShardConfig& config) {
  policy.config_sanity_check(model, config);
  policy.preprocess(model, config);
  rewrite(model, policy, config, nullptr);
  policy.postprocess(model, config);
}

void shard_modules(nn::Module& model, const Policy& policy, const ShardConfig& config,
                   const std::function<bool(const std::string& path)>& select) {
  policy.config_sanity_check(model, config);
  rewrite(model, policy, config, select);
}

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::function<std::shared_ptr<Policy>()>>& registry() {
  static std::map<std::string, std::function<std::shared_ptr<Policy>()>> r{
      {"vit", [] { return std::make_shared<ViTPolicy>(); }},
      {"gpt2", [] { return std::make_shared<GPT2LMHeadModelPolicy>(); }},
      {"llama", [] { return std::make_shared<LlamaForCausalLMPolicy>(); }}};
  return r;
}
}  // namespace

void register_policy(const std::string& name, std::function<std::shared_ptr<Policy>()> make) {
  std::lock_guard lock(registry_mutex());
  registry()[name] = std::move(make);
}

std::shared_ptr<Policy> make_policy(const std::string& name) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(name);
  if (it != registry().end()) return it->second();
  std::string known;
  for (auto& [n, f] : registry()) known += (known.empty() ? "" : ", ") + n;
  BOOSTER_THROW(ValueError, "custom_policy: no policy registered as '", name, "' (registered: ", known,
                "; register_policy(name, factory) adds one)");
}

std::shared_ptr<Policy> auto_policy(const nn::Module& model) {
  if (model.type_name() == "ViTForImageClassification") return std::make_shared<ViTPolicy>();
  if (model.type_name() == "GPT2LMHeadModel") return std::make_shared<GPT2LMHeadModelPolicy>();
  if (model.type_name() == "LlamaForCausalLM") return std::make_shared<LlamaForCausalLMPolicy>();
  return nullptr;
}

}  // namespace booster::shardformer
