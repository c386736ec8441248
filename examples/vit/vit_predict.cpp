// vit_predict: the top classes of each image, with label names and probabilities. A run's
// checkpoint says how its images were prepared: the image processor of an RGB model, the
// Fashion-MNIST grayscale of a one-channel one.
// Usage: vit_predict --checkpoint <run checkpoint folder> | --model <HF folder>  <image>...
#include <CLI/CLI.hpp>
#include <filesystem>

#include "booster/booster.h"
#include "core/autograd/grad_mode.h"
#include "core/dist/runtime.h"
#include "data/idx.h"
#include "data/image_processor.h"
#include "nn/pretrained.h"
#include "booster/trainer/run_checkpoint.h"

using namespace booster;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"Classify images with a trained ViT"};
  std::string checkpoint, model_dir;
  std::vector<std::string> images;
  int top = 3;
  auto* c = app.add_option("--checkpoint", checkpoint, "a vit_train checkpoint folder (step-N or its parent)");
  app.add_option("--model", model_dir, "a Hugging Face model folder")->excludes(c);
  app.add_option("--top", top, "classes to print per image");
  app.add_option("images", images, "JPEG or PNG files")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    std::shared_ptr<nn::ViTForImageClassification> model;
    data::ViTImageProcessor proc;
    if (!checkpoint.empty()) {
      auto dir = latest_checkpoint(checkpoint);
      BOOSTER_CHECK_T(IOError, dir.has_value(), "no complete checkpoint under '", checkpoint, "'");
      model = std::make_shared<nn::ViTForImageClassification>(
          nn::ViTConfig::from_json_file((fs::path(*dir) / "config.json").string()));
      if (model->config().num_channels == 3) proc = data::ViTImageProcessor::from_pretrained(*dir);
      Booster booster;
      load_run_model(booster, *booster.boost(model).model, *dir);
    } else {
      BOOSTER_CHECK(!model_dir.empty(), "give --checkpoint or --model");
      model = nn::vit_from_pretrained(model_dir);
      proc = data::ViTImageProcessor::from_pretrained(model_dir);
    }
    model->eval();
    NoGradGuard ng;
    const auto& cfg = model->config();
    for (auto& path : images) {
      // A one-channel model (Fashion-MNIST's) takes grayscale at its size, normalized as it trained.
      const data::Image img = data::decode_image(path);
      Tensor x = (cfg.num_channels == 1 ? data::FashionMNIST::from_image(img, cfg.image_size) : proc(img)).unsqueeze(0);
      auto probs = softmax(model->forward(x).logits).to_vector();
      std::vector<int64_t> order(probs.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
      std::printf("%s:", path.c_str());
      for (int k = 0; k < std::min<int>(top, int(order.size())); ++k)
        std::printf(" %s %.3f%s", cfg.label(order[size_t(k)]).c_str(), probs[size_t(order[size_t(k)])], k + 1 < top ? "," : "");
      std::printf("\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vit_predict: %s\n", e.what());
    return 1;
  }
}
