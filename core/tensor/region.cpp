// Region geometry (see region.h).
#include "core/tensor/region.h"

#include <algorithm>
#include <sstream>

#include "core/tensor/tensor.h"

namespace booster {

namespace {
int64_t product(const Shape& s, size_t from = 0) { return shape_numel(Shape(s.begin() + int64_t(from), s.end())); }
}  // namespace

Region Region::whole(const Shape& full) {
  Region r;
  r.full = full;
  r.offset.assign(full.size(), 0);
  r.extent = full;
  r.range_numel = shape_numel(full);
  return r;
}

Region Region::box(const Shape& full, Shape offset, Shape extent) {
  BOOSTER_CHECK_T(ShapeError, offset.size() == full.size() && extent.size() == full.size(), "Region::box: offset ",
                  shape_str(offset), " and extent ", shape_str(extent), " must have one entry per dim of ", shape_str(full));
  for (size_t d = 0; d < full.size(); ++d)
    BOOSTER_CHECK_T(ShapeError, offset[d] >= 0 && extent[d] >= 0 && offset[d] + extent[d] <= full[d], "Region::box: dim ",
                    d, " [", offset[d], ", ", offset[d] + extent[d], ") lies outside ", shape_str(full));
  Region r;
  r.full = full;
  r.offset = std::move(offset);
  r.extent = std::move(extent);
  r.range_numel = r.box_numel();
  return r;
}

Region Region::framed_box(const Shape& full, const Shape& frame, Shape offset, Shape extent) {
  BOOSTER_CHECK_T(ShapeError, shape_numel(frame) == shape_numel(full), "Region::framed_box: frame ", shape_str(frame),
                  " does not hold the elements of ", shape_str(full));
  for (size_t d = 0, f = 0; d < full.size(); ++d) {  // each dim of full: a product of consecutive frame dims
    int64_t p = 1;
    for (bool first = true; f < frame.size() && (first || p < full[d]); first = false, ++f) p *= frame[f];
    BOOSTER_CHECK_T(ShapeError, p == full[d], "Region::framed_box: frame ", shape_str(frame), " does not refine ",
                    shape_str(full), " dim by dim");
  }
  Region r = box(frame, std::move(offset), std::move(extent));
  r.full = full;
  if (frame != full) r.frame = frame;
  return r;
}

Region Region::flat(const Shape& full, int64_t start, int64_t numel) { return whole(full).sub_range(start, numel); }

Region Region::sub_range(int64_t start, int64_t numel) const {
  BOOSTER_CHECK_T(ShapeError, start >= 0 && numel >= 0 && start + numel <= range_numel, "Region: elements [", start, ", ",
                  start + numel, ") lie outside ", str(), " (", range_numel, " elements)");
  Region r = *this;
  r.range_start = range_start + start;
  r.range_numel = numel;
  return r;
}

int64_t Region::box_numel() const { return product(extent); }

bool Region::is_whole() const { return range_numel == product(full); }

Shape Region::local_shape() const {
  if (!is_box()) return Shape{range_numel};
  if (frame.empty()) return extent;
  Shape out;  // the extent's dims grouped as the frame's dims group into full's
  for (size_t d = 0, f = 0; d < full.size(); ++d) {
    int64_t p = 1, e = 1;
    for (bool first = true; f < frame.size() && (first || p < full[d]); first = false, ++f) p *= frame[f], e *= extent[f];
    out.push_back(e);
  }
  return out;
}

std::vector<Run> Region::runs() const {
  std::vector<Run> out;
  if (range_numel == 0) return out;
  const Shape& full = coords();
  const size_t nd = full.size();
  if (nd == 0) {
    out.push_back({0, 1, 0});
    return out;
  }
  // The box's runs: innermost dims it covers fully merge into the first partial dim's run.
  size_t k = nd - 1;
  while (k > 0 && extent[k] == full[k]) --k;
  const int64_t run_len = extent[k] * product(full, k + 1);
  const Shape stride = contiguous_strides(full);
  Shape idx(k, 0);  // multi-index over dims [0, k) within the box
  const int64_t outer = product(Shape(extent.begin(), extent.begin() + int64_t(k)));
  const int64_t lo = range_start, hi = range_start + range_numel;  // clip to the flat range
  int64_t local = 0;
  for (int64_t n = 0; n < outer && local < hi; ++n) {
    int64_t start = offset[k] * stride[k];
    for (size_t d = 0; d < k; ++d) start += (offset[d] + idx[d]) * stride[d];
    const int64_t a = std::max(local, lo), b = std::min(local + run_len, hi);
    if (a < b) out.push_back({start + (a - local), b - a, a - lo});
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
  if (!is_box()) {
    for (int64_t s = 0; s < range_numel; s += max_elems) out.push_back(sub_range(s, std::min(max_elems, range_numel - s)));
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
    Region piece = frame.empty() ? box(full, o, e) : framed_box(full, frame, o, e);
    if (piece.numel() <= max_elems) out.push_back(piece);
    else for (auto& p : piece.split(max_elems)) out.push_back(p);  // one row still too long
  }
  return out;
}

std::string Region::str() const {
  std::ostringstream os;
  const bool whole_box = product(extent) == product(full);
  const Shape& c = coords();
  if (!is_box()) {
    os << "elements [" << range_start << ", " << range_start + range_numel << ") of ";
    if (whole_box) return os.str() + shape_str(full);
    os << "box ";
  }
  os << "[";
  for (size_t d = 0; d < c.size(); ++d) os << (d ? ", " : "") << offset[d] << ":" << offset[d] + extent[d];
  os << "] of " << shape_str(c);
  if (!frame.empty()) os << " (" << shape_str(full) << ")";
  return os.str();
}

bool Region::operator==(const Region& o) const {
  return full == o.full && frame == o.frame && offset == o.offset && extent == o.extent && range_start == o.range_start &&
         range_numel == o.range_numel;
}

}  // namespace booster
