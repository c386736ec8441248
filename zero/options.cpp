// ZeroOptions (see options.h).
#include "zero/options.h"

#include "core/common/check.h"

namespace booster::zero {

void ZeroOptions::validate_common(const char* who) const {
  BOOSTER_CHECK(precision == "fp16" || precision == "bf16" || precision == "fp32", who,
                "precision must be one of fp16, bf16, fp32, got '", precision, "'");
  BOOSTER_CHECK(communication_dtype.empty() || communication_dtype == "fp16" || communication_dtype == "bf16" ||
                    communication_dtype == "fp32",
                who, "communication_dtype must be empty, fp16, bf16 or fp32, got '", communication_dtype, "'");
  scaler.validate(who);
}

}  // namespace booster::zero
