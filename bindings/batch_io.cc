// See batch_io.h.
#include "bindings/batch_io.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "bindings/core_common.h"

namespace py = pybind11;

namespace opt4store {
namespace {

template <typename A, typename B>
void CheckSameLength(const A& a, const B& b, const char* what) {
  if (a.ndim() != 1 || b.ndim() != 1 || a.size() != b.size()) {
    ThrowIfError(Status::InvalidArgument(std::string(what) + ": expected 1-D arrays of one length"));
  }
}

std::vector<ItemId> CheckedIds(Store* store, const IdArray& ids) {
  std::vector<ItemId> out(static_cast<size_t>(ids.size()));
  const int64_t* p = ids.data();
  for (size_t i = 0; i < out.size(); ++i) {
    if (p[i] < 0 || static_cast<uint64_t>(p[i]) >= store->dataset_size()) {
      ThrowIfError(Status::OutOfRange("index " + std::to_string(p[i]) +
                                      " is out of range for a dataset of " +
                                      std::to_string(store->dataset_size()) + " items"));
    }
    out[i] = static_cast<ItemId>(p[i]);
  }
  return out;
}

// Each leaf's row size, after checking that the leaves are contiguous CPU
// tensors lying inside the payload and that every row is inside them.
std::vector<uint64_t> LeafRowBytes(const char* what, const IdArray& rows, uint64_t payload_bytes,
                                   const std::vector<uint64_t>& offsets,
                                   const std::vector<at::Tensor>& leaves) {
  const std::string call(what);
  if (offsets.size() != leaves.size() || leaves.empty()) {
    ThrowIfError(Status::InvalidArgument(call + ": one offset per leaf, at least one leaf"));
  }
  std::vector<uint64_t> row_bytes(leaves.size());
  int64_t batch_rows = INT64_MAX;
  for (size_t j = 0; j < leaves.size(); ++j) {
    const at::Tensor& leaf = leaves[j];
    if (!leaf.device().is_cpu() || !leaf.is_contiguous() || leaf.dim() < 1) {
      ThrowIfError(Status::InvalidArgument(call + ": leaves must be contiguous CPU tensors"));
    }
    int64_t row_elements = 1;  // a leaf of 0 rows still has a row size
    for (int64_t d = 1; d < leaf.dim(); ++d) row_elements *= leaf.size(d);
    row_bytes[j] = static_cast<uint64_t>(row_elements) * leaf.element_size();
    if (offsets[j] > payload_bytes || row_bytes[j] > payload_bytes - offsets[j]) {  // no wrap
      ThrowIfError(Status::InvalidArgument(call + ": a leaf reaches past the payload"));
    }
    batch_rows = std::min<int64_t>(batch_rows, leaf.size(0));
  }
  const int64_t* row = rows.data();
  for (py::ssize_t i = 0; i < rows.size(); ++i) {
    if (row[i] < 0 || row[i] >= batch_rows) {
      ThrowIfError(Status::OutOfRange(call + ": row " + std::to_string(row[i]) +
                                      " is outside the batch"));
    }
  }
  return row_bytes;
}

}  // namespace

// One read of ReadInto: meta into a string to compare with the template;
// the payload in pieces straight into the row of each leaf tensor when its
// size is the template's, else into a buffer of its own (not this layout).
class RowSink : public ReadSink {
 public:
  Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                 void** payload_dst) override {
    meta.resize(meta_size);
    *meta_dst = meta.data();
    if (payload_size == expected_payload) {
      *payload_dst = nullptr;
    } else {
      other.reset(new char[payload_size ? payload_size : 1]);
      *payload_dst = other.get();
    }
    return Status::OK();
  }
  const std::vector<Piece>* pieces() const override { return &row_pieces; }

  std::string meta;
  uint64_t expected_payload = 0;
  std::vector<Piece> row_pieces;
  std::unique_ptr<char[]> other;
};

py::list GetBatchValues(Store* store, const PositionArray& positions, const IdArray& ids) {
  CheckSameLength(positions, ids, "get_batch");
  const size_t n = static_cast<size_t>(ids.size());
  const std::vector<ItemId> id_list = CheckedIds(store, ids);
  std::vector<uint64_t> position_list(positions.data(), positions.data() + n);
  std::vector<TensorSink> sinks(n);
  std::vector<ReadSink*> sink_ptrs(n);
  for (size_t i = 0; i < n; ++i) sink_ptrs[i] = &sinks[i];
  std::vector<Status> statuses(n);
  {
    py::gil_scoped_release release;
    store->GetBatch(position_list.data(), id_list.data(), n, sink_ptrs.data(), statuses.data(),
                    nullptr);
  }
  py::list out;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) {
      out.append(py::none());
      continue;
    }
    ThrowIfError(statuses[i]);
    out.append(ValueObject(sinks[i]));
  }
  return out;
}

ReadIntoJob::ReadIntoJob(Store* store, const PositionArray& positions, const IdArray& ids,
                         const IdArray& rows, const std::string& meta, uint64_t payload_bytes,
                         const std::vector<uint64_t>& offsets,
                         const std::vector<at::Tensor>& leaves)
    : store_(store), meta_(meta), leaves_(leaves) {
  CheckSameLength(positions, ids, "read_into");
  CheckSameLength(rows, ids, "read_into");
  const size_t n = static_cast<size_t>(ids.size());
  ids_ = CheckedIds(store, ids);
  positions_.assign(positions.data(), positions.data() + n);
  const std::vector<uint64_t> row_bytes =
      LeafRowBytes("read_into", rows, payload_bytes, offsets, leaves);
  sinks_.reset(new RowSink[n]);
  sink_ptrs_.resize(n);
  const int64_t* row = rows.data();
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < leaves.size(); ++j) {
      char* base = static_cast<char*>(leaves[j].data_ptr());
      sinks_[i].row_pieces.push_back({offsets[j], row_bytes[j], base + row[i] * row_bytes[j]});
    }
    sinks_[i].expected_payload = payload_bytes;
    sink_ptrs_[i] = &sinks_[i];
  }
  statuses_.resize(n);
}

ReadIntoJob::~ReadIntoJob() { Join(); }

void ReadIntoJob::Run() {
  store_->GetBatch(positions_.data(), ids_.data(), ids_.size(), sink_ptrs_.data(),
                   statuses_.data(), nullptr);
}

void ReadIntoJob::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ReadIntoJob::Join() {
  if (thread_.joinable()) thread_.join();
}

py::array_t<int8_t> ReadIntoJob::Wait() {
  {
    py::gil_scoped_release release;
    Join();
  }
  const size_t n = ids_.size();
  py::array_t<int8_t> codes(static_cast<py::ssize_t>(n));
  int8_t* code = codes.mutable_data();
  for (size_t i = 0; i < n; ++i) {
    if (statuses_[i].IsNotFound()) {
      code[i] = 1;
    } else {
      ThrowIfError(statuses_[i]);
      code[i] = sinks_[i].other == nullptr && sinks_[i].meta == meta_ ? 0 : 2;
    }
  }
  return codes;
}

py::array_t<int8_t> ReadInto(Store* store, const PositionArray& positions, const IdArray& ids,
                             const IdArray& rows, const std::string& meta,
                             uint64_t payload_bytes, const std::vector<uint64_t>& offsets,
                             const std::vector<at::Tensor>& leaves) {
  ReadIntoJob job(store, positions, ids, rows, meta, payload_bytes, offsets, leaves);
  {
    py::gil_scoped_release release;
    job.Run();
  }
  return job.Wait();
}

std::unique_ptr<ReadIntoJob> StartReadInto(Store* store, const PositionArray& positions,
                                           const IdArray& ids, const IdArray& rows,
                                           const std::string& meta, uint64_t payload_bytes,
                                           const std::vector<uint64_t>& offsets,
                                           const std::vector<at::Tensor>& leaves) {
  auto job = std::make_unique<ReadIntoJob>(store, positions, ids, rows, meta, payload_bytes,
                                           offsets, leaves);
  job->Start();
  return job;
}

void PutRows(Store* store, const PositionArray& positions, const IdArray& ids,
             const IdArray& rows, const std::string& meta, uint64_t payload_bytes,
             const std::vector<uint64_t>& offsets, const std::vector<at::Tensor>& leaves) {
  CheckSameLength(positions, ids, "put_rows");
  CheckSameLength(rows, ids, "put_rows");
  const size_t n = static_cast<size_t>(ids.size());
  const std::vector<ItemId> id_list = CheckedIds(store, ids);
  const std::vector<uint64_t> row_bytes =
      LeafRowBytes("put_rows", rows, payload_bytes, offsets, leaves);
  // The meta must describe a payload of that size: a stored value whose
  // header disagrees with its bytes would fail every later read.
  ValueHeader header;
  if (!DecodeValueHeader(meta, &header).ok() || header.PayloadBytes() != payload_bytes) {
    ThrowIfError(Status::InvalidArgument("put_rows: meta does not describe a payload of " +
                                         std::to_string(payload_bytes) + " bytes"));
  }
  std::vector<const char*> bases(leaves.size());
  for (size_t j = 0; j < leaves.size(); ++j) {
    bases[j] = static_cast<const char*>(leaves[j].data_ptr());
  }
  const uint64_t* position = positions.data();
  const int64_t* row = rows.data();
  Status s;
  {
    py::gil_scoped_release release;
    std::string payload(payload_bytes, '\0');  // the padding stays zero
    for (size_t i = 0; i < n && s.ok(); ++i) {
      for (size_t j = 0; j < leaves.size(); ++j) {
        std::memcpy(payload.data() + offsets[j], bases[j] + row[i] * row_bytes[j], row_bytes[j]);
      }
      s = store->Put(position[i], id_list[i], meta, payload);
    }
  }
  ThrowIfError(s);
}

py::array_t<uint8_t> LocateIds(Store* store, const IdArray& ids) {
  if (ids.ndim() != 1) ThrowIfError(Status::InvalidArgument("locate: expected a 1-D array"));
  const size_t n = static_cast<size_t>(ids.size());
  const std::vector<ItemId> id_list = CheckedIds(store, ids);
  std::vector<GetSource> sources(n);
  store->Locate(id_list.data(), n, sources.data());
  py::array_t<uint8_t> out(static_cast<py::ssize_t>(n));
  uint8_t* p = out.mutable_data();
  for (size_t i = 0; i < n; ++i) {
    p[i] = sources[i] == GetSource::kRam ? 1 : sources[i] == GetSource::kDisk ? 2 : 0;
  }
  return out;
}

}  // namespace opt4store
