// Checkpoint records (see records.h).
#include "booster/checkpoint/records.h"

#include <algorithm>
#include <cstring>

#include "booster/checkpoint/container.h"
#include "core/autograd/grad_mode.h"

namespace booster::ckpt {

namespace {
// A record is the flat range [offset, offset + numel) of a box's row-major order; without
// box fields the box is the whole tensor.
template <typename Msg>
Region region_from(const Msg& m, const Shape& full, const std::string& where) {
  try {
    const Shape offset(m.box_offset().begin(), m.box_offset().end()), extent(m.box_extent().begin(), m.box_extent().end());
    const Region box = m.box_extent_size() == 0 ? Region::whole(full)
                       : m.box_frame_size() == 0
                           ? Region::box(full, offset, extent)
                           : Region::framed_box(full, Shape(m.box_frame().begin(), m.box_frame().end()), offset, extent);
    return box.sub_range(m.offset(), m.numel());
  } catch (const ShapeError& e) {
    BOOSTER_THROW(IOError, where, ": a record does not fit its tensor: ", e.what());
  }
}

template <typename Msg>
void region_into(Msg& m, const Region& r) {
  m.clear_box_offset();
  m.clear_box_extent();
  m.clear_box_frame();
  m.set_offset(r.range_start);
  m.set_numel(r.range_numel);
  if (r.box_numel() == shape_numel(r.full)) return;  // the box is the whole tensor
  for (int64_t v : r.offset) m.add_box_offset(v);
  for (int64_t v : r.extent) m.add_box_extent(v);
  for (int64_t v : r.frame) m.add_box_frame(v);
}
}  // namespace

Region region_of(const proto::RecordLocation& loc, const Shape& full, const std::string& where) {
  return region_from(loc, full, where);
}

Region region_of(const proto::TensorRecord& rec, const std::string& where) {
  return region_from(rec, Shape(rec.shape().begin(), rec.shape().end()), where);
}

void set_region(proto::RecordLocation& loc, const Region& r) { region_into(loc, r); }
void set_region(proto::TensorRecord& rec, const Region& r) { region_into(rec, r); }

proto::TensorRecord make_record(const std::string& name, DType dtype, const Region& r, const void* data) {
  proto::TensorRecord rec;
  rec.set_name(name);
  rec.set_dtype(to_proto(dtype));
  for (int64_t d : r.full) rec.add_shape(d);
  set_region(rec, r);
  const size_t bytes = size_t(r.numel()) * dtype_size(dtype);
  rec.set_data(data, bytes);
  rec.set_checksum(checksum(data, bytes));
  return rec;
}

template <typename Err>
void check_tiling(const std::string& name, const Shape& full, const std::vector<Region>& regions,
                  const std::string& where) {
  std::vector<Run> runs;
  for (auto& r : regions)
    for (auto& run : r.runs()) runs.push_back(run);
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.start < b.start; });
  int64_t covered = 0;
  for (auto& run : runs) {
    BOOSTER_CHECK_T(Err, run.start >= covered, where, ": the parts of tensor '", name, "' overlap at element ",
                    run.start);
    BOOSTER_CHECK_T(Err, run.start == covered, where, ": the parts of tensor '", name, "' leave elements [", covered,
                    ", ", run.start, ") uncovered");
    covered += run.length;
  }
  const int64_t n = shape_numel(full);
  BOOSTER_CHECK_T(Err, covered == n, where, ": the parts of tensor '", name, "' hold ", covered, " of its ", n,
                  " elements");
}
template void check_tiling<IOError>(const std::string&, const Shape&, const std::vector<Region>&, const std::string&);
template void check_tiling<ValueError>(const std::string&, const Shape&, const std::vector<Region>&, const std::string&);

int64_t copy_shared(Tensor& dst, const Region& dst_region, const void* src, DType src_dtype, const Region& src_region) {
  NoGradGuard ng;
  Tensor src_flat = Tensor::from_blob(const_cast<void*>(src), {src_region.numel()}, src_dtype);
  Tensor dst_flat = dst.detach().view({-1});
  const size_t es = dtype_size(src_dtype);
  const bool raw = src_dtype == dst.dtype();
  char* dst_bytes = static_cast<char*>(dst_flat.raw_data());
  const char* src_bytes = static_cast<const char*>(src);
  return for_each_overlap(dst_region.runs(), src_region.runs(), [&](int64_t d, int64_t s, int64_t n) {
    if (raw) std::memcpy(dst_bytes + size_t(d) * es, src_bytes + size_t(s) * es, size_t(n) * es);
    else dst_flat.narrow(0, d, n).copy_(src_flat.narrow(0, s, n));
  });
}

}  // namespace booster::ckpt
