// Boosts a small ViT with TorchDDPPlugin and takes one training step.
#include <cstdio>

#include "booster/booster.h"
#include "core/dist/runtime.h"
#include "nn/vit.h"
#include "optim/adam.h"
#include "plugins/registry.h"

using namespace booster;

int main() {
  dist::launch_from_openmpi();
  nn::ViTConfig c;
  c.hidden_size = 32, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.intermediate_size = 64;
  c.image_size = 16, c.patch_size = 8, c.num_labels = 3;
  auto model = std::make_shared<nn::ViTForImageClassification>(c);
  Booster booster(plugins::make_plugin(Config::from_string("[plugin]\nname = 'torch_ddp'\n")));
  auto [vit, optimizer, criterion, loader, scheduler] =
      booster.boost(model, std::make_shared<optim::HybridAdam>(model->named_parameters()));
  Tensor x = Tensor::empty({2, 3, 16, 16});
  Generator(uint64_t(dist::world_rank())).normal_(x);
  Tensor y = Tensor::from_ints({0, 2}, {2});
  Tensor loss = vit(x, y).loss;
  booster.backward(loss, *optimizer);
  optimizer->step();
  std::printf("rank %d of %d: one step, loss %.4f\n", dist::world_rank(), dist::world_size(), loss.item());
  return 0;
}
