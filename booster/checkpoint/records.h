// Records of a checkpoint: converting regions to and from their protobuf form, checking
// that a tensor's records tile it exactly, and copying what two regions share.
#pragma once

#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "proto/checkpoint.pb.h"

namespace booster::ckpt {

/// The region a record location describes (flat range, or box in format 2); IOError
/// naming `where` when it does not fit the tensor's shape.
Region region_of(const proto::RecordLocation& loc, const Shape& full, const std::string& where);
/// The region a record holds.
Region region_of(const proto::TensorRecord& rec, const std::string& where);
/// Writes a region into a location / record (0-d tensors as the flat range [0, 1)).
void set_region(proto::RecordLocation& loc, const Region& r);
void set_region(proto::TensorRecord& rec, const Region& r);
/// A record of region `r` of tensor `name`, from `data` (r.numel() elements of `dtype`).
proto::TensorRecord make_record(const std::string& name, DType dtype, const Region& r, const void* data);

/// Throws `Err` (naming `where` and the tensor) unless the regions tile the tensor exactly:
/// every element once, no gap, no overlap.
template <typename Err>
void check_tiling(const std::string& name, const Shape& full, const std::vector<Region>& regions,
                  const std::string& where);

/// Copies into `dst` (the contiguous local data of region `dst_region`) what it shares
/// with src (the local data of `src_region`, `src_dtype`), converting dtypes; returns the
/// elements copied.
int64_t copy_shared(Tensor& dst, const Region& dst_region, const void* src, DType src_dtype, const Region& src_region);

}  // namespace booster::ckpt
