// DataLoader throughput from JPEG files to normalized 224x224 training batches (decode
// every time: no cache), with 1 and 2 workers, against the images/s a ViT-Ti and a ViT-B
// training step consume, measured in the same run. Target: 2x headroom over ViT-Ti,
// 10x over ViT-B.
#include <chrono>
#include <cstdio>

#include "core/autograd/grad_mode.h"
#include "data/dataloader.h"
#include "nn/vit.h"

using namespace booster;
using Clock = std::chrono::steady_clock;

namespace {

double loader_images_per_s(int workers, int batches) {
  data::ImageFolderOptions o;
  o.verify = false;
  o.cache_bytes = 0;
  auto ds = std::make_shared<data::BeansDataset>(data::BeansDataset::default_root(), "train", data::ViTImageProcessor{},
                                                 /*augment=*/true, 1, o);
  data::DataLoaderOptions lo;
  lo.batch_size = 16;
  lo.shuffle = true;
  lo.num_workers = workers;
  data::DataLoader dl(ds, lo);
  auto t0 = Clock::now();
  int n = 0;
  for (int b = 0; b < batches; ++b) n += int(dl.next()->at("labels").numel());
  return n / std::chrono::duration<double>(Clock::now() - t0).count();
}

double vit_images_per_s(const std::string& preset, int batch) {
  nn::ViTConfig c = nn::ViTConfig::preset(preset);
  c.num_labels = 3;
  nn::ViTForImageClassification m(c);
  Tensor x = Tensor::zeros({batch, 3, 224, 224});
  Tensor y = Tensor::zeros({batch}, DType::i64);
  m(x, y).loss.backward();  // warm-up
  m.zero_grad();
  auto t0 = Clock::now();
  m(x, y).loss.backward();
  return batch / std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main() {
  const double tiny = vit_images_per_s("vit-tiny", 16);
  const double base = vit_images_per_s("vit-base", 8);
  std::printf("ViT-Ti step consumes %.1f img/s, ViT-B %.2f img/s\n", tiny, base);
  for (int w : {1, 2}) {
    const double ips = loader_images_per_s(w, 12);
    std::printf("loader, %d worker(s): %7.1f img/s  headroom vs ViT-Ti %.1fx (need 2x), vs ViT-B %.0fx (need 10x)\n", w,
                ips, ips / tiny, ips / base);
  }
}
