// Galvatron's hybrid-parallel plan: one global pipeline degree and, for each transformer
// layer, a tensor-parallel degree (or a Ulysses degree: use_sp), whether its group is
// consecutive ranks or strided, its data-parallel kind and whether it is checkpointed; the
// embeddings and the head take the vocab degree vtp (tensor parallel, or with vsp whole
// weights on the group's rows). It is read from Galvatron's strategy JSON (its keys and
// CSV values, as galvatron_search and Galvatron's own search write them) or made from the
// global-mode arguments, checked against the world and the model, and written back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace booster::galvatron {

/// Data-parallel kinds: Galvatron's dp_types_enc 0 (the plan's default_dp_type) and 1 (ZeRO-3).
enum class DpKind { ddp, zero2, zero3 };
DpKind dp_kind_from_name(const std::string& name, const std::string& where);
std::string dp_kind_name(DpKind k);

/// True for 1, 2, 4, ...: every Galvatron degree.
bool power_of_two(int64_t v);

struct LayerStrategy {
  int tp = 1;
  bool tp_consec = true;
  bool sdp = false;  // dp_types_enc 1: ZeRO-3 whatever the default
  bool checkpoint = false;
  bool sp = false;  // use_sp 1: Ulysses of degree tp (whole weights, tokens split, heads exchanged)
  bool operator==(const LayerStrategy&) const = default;
  /// Ulysses in effect (a group of one is plain data parallelism).
  bool ulysses() const { return sp && tp > 1; }
  /// Whether it runs on its group's share of the tokens: Ulysses, or tensor parallel under
  /// Megatron's sequence parallelism (megatron_sp: the run's sequence_parallel).
  bool splits_tokens(bool megatron_sp) const { return tp > 1 && (sp || megatron_sp); }
  /// Whether its tensor-parallel group is consecutive ranks in a stage of `stage` ranks
  /// (consecutive and strided are the same group when tp is 1 or the whole stage).
  bool consecutive(int stage) const { return tp == 1 || tp == stage || tp_consec; }
};

struct HybridPlan {
  int pp_deg = 1;
  std::vector<LayerStrategy> layers;   // one per transformer layer
  std::vector<int64_t> pp_division;    // layers per stage (empty: even, the remainder on the last)
  int64_t global_bsz = 0;              // 0: the run's
  int64_t chunks = 1;                  // micro-batches a step (-1: micro-batches of 4 rows when pp > 1)
  std::string pipeline_type = "pipedream_flush";  // or gpipe
  std::string default_dp_type = "ddp";            // ddp, zero2 (or zero3)
  int vtp = 1;                         // the embeddings' and head's tensor-parallel degree
  bool embed_sdp = false;              // the embeddings and head under ZeRO-3
  bool vsp = false;                    // vtp is a Ulysses degree: the embeddings and head whole, data parallel over the stage
  int world_size = 0;                  // the world it was made for (0: unsaid)
  std::string source;                  // the file it was read from ("" : global mode)

  /// Galvatron's strategy JSON. Unknown keys, values of the wrong kind and lists of another
  /// length are refused naming the key and the file; cp (context parallelism) must be off.
  static HybridPlan from_json_file(const std::string& path);
  static HybridPlan from_json(const std::string& text, const std::string& source);
  /// The same keys back (CSV lists, as Galvatron writes them).
  std::string to_json() const;
  void write_json(const std::string& path) const;

  /// Checks the plan against the world and the model's transformer layers: degrees powers
  /// of two that multiply into the world, the layer count, pp_division, vtp, global_bsz
  /// divisible by world / (pp x min tp). Errors name the key and the file.
  void validate(int world, int64_t num_layers) const;
  /// Layers per stage (pp_division or the even split).
  std::vector<int64_t> stage_layers() const;
  /// Micro-batches a stage holds activations of at once: 1 without a pipeline, every chunk
  /// under GPipe, min(pp - k, chunks) on stage k under 1F1B.
  int64_t in_flight(int stage_index) const;
  /// The embeddings' and head's strategy (never checkpointed, consecutive groups).
  LayerStrategy boundary() const { return {vtp, true, embed_sdp, false, vsp}; }
  /// A layer's data-parallel kind.
  DpKind dp_kind(const LayerStrategy& s) const { return s.sdp ? DpKind::zero3 : dp_kind_from_name(default_dp_type, where("default_dp_type")); }
  /// Galvatron's notation of one layer's strategy in a world: pp-tp[*]-dp[*][f][-c][-sp].
  std::string describe(const LayerStrategy& s, int world) const;
  /// The distinct layer strategies with their layer ranges, for logs ("0-5: 1-2*-2f").
  std::string summary(int world) const;
  /// "'key' in file" or "[plugin] key" (global mode).
  std::string where(const std::string& key) const;
};

}  // namespace booster::galvatron
