// Region geometry (see region.h).
#include "core/tensor/region.h"

#include <algorithm>
#include <sstream>

#include "core/tensor/tensor.h"

namespace booster {

namespace {
int64_t product(const Shape& s, size_t from = 0) { return shape_numel(Shape(s.begin() + int64_t(from), s.end())); }
std::string dims(const Shape& s) { return shape_str(s); }
}  // namespace

Region Region::whole(const Shape& full) {
  Region r;
  r.full = full;
  r.offset.assign(full.size(), 0);
  r.extent = full;
  return r;
}

Region Region::box(const Shape& full, Shape offset, Shape extent) {
  BOOSTER_CHECK_T(ShapeError, offset.size() == full.size() && extent.size() == full.size(), "Region::box: offset ",
                  dims(offset), " and extent ", dims(extent), " must have one entry per dim of ", dims(full));
  for (size_t d = 0; d < full.size(); ++d)
    BOOSTER_CHECK_T(ShapeError, offset[d] >= 0 && extent[d] >= 0 && offset[d] + extent[d] <= full[d], "Region::box: dim ",
                    d, " [", offset[d], ", ", offset[d] + extent[d], ") lies outside ", dims(full));
  Region r;
  r.full = full;
  r.offset = std::move(offset);
  r.extent = std::move(extent);
  return r;
}

Region Region::flat(const Shape& full, int64_t start, int64_t numel) {
  BOOSTER_CHECK_T(ShapeError, start >= 0 && numel >= 0 && start + numel <= product(full), "Region::flat: elements [",
                  start, ", ", start + numel, ") lie outside ", dims(full), " (", product(full), " elements)");
  Region r;
  r.full = full;
  r.kind = Kind::flat;
  r.offset = {start};
  r.extent = {numel};
  return r;
}

int64_t Region::numel() const { return kind == Kind::flat ? extent[0] : product(extent); }

bool Region::is_whole() const { return numel() == product(full); }

Shape Region::local_shape() const { return extent; }

std::vector<Run> Region::runs() const {
  std::vector<Run> out;
  if (numel() == 0) return out;
  if (kind == Kind::flat) {
    out.push_back({offset[0], extent[0], 0});
    return out;
  }
  const size_t nd = full.size();
  if (nd == 0) {
    out.push_back({0, 1, 0});
    return out;
  }
  // Innermost dims the box covers fully merge into the run of the first partial dim.
  size_t k = nd - 1;
  while (k > 0 && extent[k] == full[k] && offset[k] == 0) --k;
  const int64_t run_len = extent[k] * product(full, k + 1);
  const Shape stride = contiguous_strides(full);
  Shape idx(k, 0);      // multi-index over dims [0, k) within the box
  const int64_t outer = product(Shape(extent.begin(), extent.begin() + int64_t(k)));
  out.reserve(size_t(outer));
  int64_t local = 0;
  for (int64_t n = 0; n < outer; ++n) {
    int64_t start = offset[k] * stride[k];
    for (size_t d = 0; d < k; ++d) start += (offset[d] + idx[d]) * stride[d];
    out.push_back({start, run_len, local});
    local += run_len;
    for (size_t d = k; d-- > 0;) {  // next multi-index, last dim fastest
      if (++idx[d] < extent[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<Region> Region::split(int64_t max_elems) const {
  BOOSTER_CHECK(max_elems > 0, "Region::split: max_elems must be positive");
  std::vector<Region> out;
  if (numel() <= max_elems) {
    out.push_back(*this);
    return out;
  }
  if (kind == Kind::flat) {
    for (int64_t s = 0; s < extent[0]; s += max_elems)
      out.push_back(flat(full, offset[0] + s, std::min(max_elems, extent[0] - s)));
    return out;
  }
  // Slabs along the outermost dim with more than one row; a single row recurses inward.
  size_t d = 0;
  while (d < extent.size() && extent[d] == 1) ++d;
  const int64_t row = product(Shape(extent.begin() + int64_t(d) + 1, extent.end()));
  const int64_t rows_per = std::max<int64_t>(1, max_elems / std::max<int64_t>(1, row));
  for (int64_t s = 0; s < extent[d]; s += rows_per) {
    Shape o = offset, e = extent;
    o[d] += s;
    e[d] = std::min(rows_per, extent[d] - s);
    Region piece = box(full, o, e);
    if (piece.numel() <= max_elems) out.push_back(piece);
    else for (auto& p : piece.split(max_elems)) out.push_back(p);  // one row still too long
  }
  return out;
}

std::string Region::str() const {
  std::ostringstream os;
  if (kind == Kind::flat) {
    os << "elements [" << offset[0] << ", " << offset[0] + extent[0] << ") of " << dims(full);
    return os.str();
  }
  os << "[";
  for (size_t d = 0; d < full.size(); ++d) os << (d ? ", " : "") << offset[d] << ":" << offset[d] + extent[d];
  os << "] of " << dims(full);
  return os.str();
}

bool Region::operator==(const Region& o) const {
  return full == o.full && kind == o.kind && offset == o.offset && extent == o.extent;
}

}  // namespace booster
