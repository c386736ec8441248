// libFuzzer target for the checkpoint readers: arbitrary bytes as a single-file
// checkpoint, and as the index and shard of a folder. Errors must be exceptions, never
// crashes, hangs or memory errors.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "booster/checkpoint/tensor_store.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = fs::temp_directory_path() / ("booster_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string magic = "BSTCKPT1";
  const std::string body(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream(dir / "single.ckpt", std::ios::binary) << magic << body;
    try {
      booster::ckpt::load_tensors((dir / "single.ckpt").string(), "model");
    } catch (const std::exception&) {
    }
  }
  {
    const size_t cut = size ? data[0] % (size + 1) : 0;
    std::ofstream(dir / "model.index", std::ios::binary) << magic << body.substr(0, cut);
    for (int i = 1; i <= 2; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-fuzz-%05d.shard", i);
      std::ofstream(dir / name, std::ios::binary) << magic << body.substr(cut);
    }
    try {
      booster::ckpt::load_tensors(dir.string(), "model");
    } catch (const std::exception&) {
    }
  }
  return 0;
}
