// Errors and the one check macro of the house: a failed check throws a typed exception
// whose message says what was expected, what was found and where (op, shapes, path, file).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace booster {

/// Base of every error booster-cpp throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Wrong argument value or option.
class ValueError : public Error { using Error::Error; };
/// Shapes that do not fit together.
class ShapeError : public Error { using Error::Error; };
/// Dtype not supported or mismatched.
class DTypeError : public Error { using Error::Error; };
/// A file that cannot be read, written or parsed.
class IOError : public Error { using Error::Error; };
/// Misuse of autograd (freed graph, missing gradient, ...).
class AutogradError : public Error { using Error::Error; };
/// A failure inside oneDNN, MPI or another backend library.
class BackendError : public Error { using Error::Error; };

namespace detail {
/// Streams every argument into one string.
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace booster

/// Throws `ErrType` with the streamed message when `cond` is false.
#define BOOSTER_CHECK_T(ErrType, cond, ...)                                          \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      throw ErrType(::booster::detail::concat(__VA_ARGS__));                         \
  } while (0)

/// Throws ValueError with the streamed message when `cond` is false.
#define BOOSTER_CHECK(cond, ...) BOOSTER_CHECK_T(::booster::ValueError, cond, __VA_ARGS__)

/// Unconditionally throws `ErrType` with the streamed message.
#define BOOSTER_THROW(ErrType, ...) throw ErrType(::booster::detail::concat(__VA_ARGS__))
