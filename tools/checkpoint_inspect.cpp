// checkpoint_inspect: prints a checkpoint's index (kind, layout, shards), every tensor's
// name, shape and dtype, and whether its checksums verify.
// Usage: checkpoint_inspect <checkpoint file or folder> [--kind model|optimizer] [--prefix P]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "booster/checkpoint/tensor_store.h"

using namespace booster;

int main(int argc, char** argv) {
  CLI::App app{"Inspect a booster-cpp checkpoint"};
  std::string path, kind = "model", prefix;
  app.add_option("checkpoint", path, "checkpoint file or folder")->required();
  app.add_option("--kind", kind, "model or optimizer");
  app.add_option("--prefix", prefix, "file-name prefix used when saving");
  CLI11_PARSE(app, argc, argv);
  try {
    auto loaded = ckpt::load_tensors(path, kind, prefix);  // verifies every checksum
    const auto& idx = loaded.index;
    std::printf("checkpoint: %s\nkind: %s  format: %u  save id: %s\n", loaded.source.c_str(), idx.kind().c_str(),
                idx.format_version(), idx.save_id().c_str());
    const auto& l = idx.layout();
    std::printf("layout: plugin=%s world=%d dp=%d tp=%d pp=%d precision=%s\n", l.plugin().empty() ? "-" : l.plugin().c_str(),
                l.world_size(), l.dp_size(), l.tp_size(), l.pp_size(), l.precision().empty() ? "-" : l.precision().c_str());
    std::printf("shards: %d%s\n", idx.shard_files_size(), idx.shard_files_size() ? "" : " (single file)");
    for (auto& f : idx.shard_files()) std::printf("  %s\n", f.c_str());
    if (idx.has_optimizer()) std::printf("optimizer: %s, %d groups\n", idx.optimizer().type().c_str(), idx.optimizer().groups_size());
    int64_t total = 0;
    for (auto& [name, t] : loaded.tensors) {
      std::printf("  %-64s %-5s %-18s ok\n", name.c_str(), dtype_name(t.dtype()), shape_str(t.shape()).c_str());
      total += t.numel();
    }
    std::printf("%zu tensors, %lld elements, all checksums verified\n", loaded.tensors.size(), (long long)total);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_inspect: %s\n", e.what());
    return 1;
  }
}
