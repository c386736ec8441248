// The op test table: every differentiable op with small input shapes, shared by the
// gradient checks and the fast-vs-reference comparisons.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/kernels/ops.h"

namespace booster::testing {

/// One op application to test.
struct OpCase {
  std::string name;
  std::vector<Shape> shapes;                                 // differentiable inputs
  std::function<Tensor(const std::vector<Tensor>&)> fn;      // the op under test
  std::function<void(std::vector<float>&, size_t)> shape_values;  // optional input tweak (input index)
};

/// All cases.
std::vector<OpCase> op_cases();

}  // namespace booster::testing

namespace booster::testing {
/// gtest printer: the case name instead of a byte dump.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }
}  // namespace booster::testing
