// Dropout under tensor parallelism (see dropout.h).
#include "nn/parallel/dropout.h"

namespace booster::nn {

TPDropout::TPDropout(double p, std::shared_ptr<Generator> gen, bool parallel_input)
    : p_(p), gen_(std::move(gen)), parallel_(parallel_input) {
  BOOSTER_CHECK(gen_ != nullptr, type_name(), ": needs a generator");
}

std::shared_ptr<UnaryModule> TPDropout::from_native_module(const std::shared_ptr<Module>& native,
                                                           std::shared_ptr<Generator> gen, bool parallel_input) {
  if (auto done = std::dynamic_pointer_cast<TPDropout>(native)) return done;
  const auto& d = native_as<Dropout>(native, std::string("DropoutFor") + (parallel_input ? "Parallel" : "Replicated") + "Input",
                                     "a Dropout");
  return std::make_shared<TPDropout>(d.p(), std::move(gen), parallel_input);
}

}  // namespace booster::nn
