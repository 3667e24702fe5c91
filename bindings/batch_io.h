// Batch reads and writes for Python: a batch of values in one call into the
// store with the GIL released once (CachedDataset.__getitems__), the batch
// loader's native assembly of a batch straight into its leaf tensors and its
// puts from them (opt4store.DataLoader), and where items are (Store::Locate).
#ifndef OPT4STORE_BINDINGS_BATCH_IO_H_
#define OPT4STORE_BINDINGS_BATCH_IO_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <torch/extension.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "opt4store/read_sink.h"
#include "opt4store/store.h"

namespace opt4store {

using IdArray = pybind11::array_t<int64_t, pybind11::array::c_style | pybind11::array::forcecast>;
// Plan positions; NO_POSITION (2^64 - 1) for a read without one.
using PositionArray =
    pybind11::array_t<uint64_t, pybind11::array::c_style | pybind11::array::forcecast>;

// Store.get for each (positions[i], ids[i]): a list of what Store.get
// returns (None for a miss).
pybind11::list GetBatchValues(Store* store, const PositionArray& positions, const IdArray& ids);

// Reads (positions[i], ids[i]) into row rows[i] of every leaf tensor: the
// payload bytes [offsets[j], offsets[j] + leaf row bytes) go to leaves[j]
// row rows[i], one copy from the store. Each leaf is a contiguous CPU
// tensor whose first dimension counts rows. A value whose meta differs from
// `meta` (another structure, dtype or shape) or whose payload is not
// payload_bytes long is not this layout. Returns a
// code per read: 0 read, 1 a miss, 2 not this layout (its rows hold
// garbage; read it another way). Errors other than a miss raise.
pybind11::array_t<int8_t> ReadInto(Store* store, const PositionArray& positions, const IdArray& ids,
                                   const IdArray& rows, const std::string& meta,
                                   uint64_t payload_bytes, const std::vector<uint64_t>& offsets,
                                   const std::vector<at::Tensor>& leaves);

// The inverse of ReadInto: stores row rows[i] of the leaf tensors as the
// value of (positions[i], ids[i]), with `meta` and a payload of
// payload_bytes holding leaves[j]'s row at offsets[j] (zeros between
// leaves), one Store::Put each. opt4store.DataLoader's workers write loaded
// rows into a shared batch slot and the loader stores them from there, so
// a loaded value crosses no queue and is encoded by no Python.
void PutRows(Store* store, const PositionArray& positions, const IdArray& ids,
             const IdArray& rows, const std::string& meta, uint64_t payload_bytes,
             const std::vector<uint64_t>& offsets, const std::vector<at::Tensor>& leaves);

// ReadInto as a job: the arguments are checked and the reads set up at
// construction (with the GIL); Run() reads, in the caller's thread (GIL
// released) or, after Start(), in a thread of its own that touches no
// Python object, so it overlaps the training loop's step
// (opt4store.DataLoader's read-ahead); Wait() joins it and returns
// ReadInto's codes. The leaf tensors are held until the job is destroyed,
// which joins too. Thread safety: one thread calls its methods.
class RowSink;
class ReadIntoJob {
 public:
  ReadIntoJob(Store* store, const PositionArray& positions, const IdArray& ids,
              const IdArray& rows, const std::string& meta, uint64_t payload_bytes,
              const std::vector<uint64_t>& offsets, const std::vector<at::Tensor>& leaves);
  ~ReadIntoJob();
  ReadIntoJob(const ReadIntoJob&) = delete;
  ReadIntoJob& operator=(const ReadIntoJob&) = delete;

  void Run();
  void Start();
  pybind11::array_t<int8_t> Wait();

 private:
  void Join();

  Store* store_;
  std::string meta_;
  std::vector<at::Tensor> leaves_;
  std::vector<uint64_t> positions_;
  std::vector<ItemId> ids_;
  std::unique_ptr<RowSink[]> sinks_;
  std::vector<ReadSink*> sink_ptrs_;
  std::vector<Status> statuses_;
  std::thread thread_;
};

// A ReadIntoJob started on its thread (Store.read_into_async).
std::unique_ptr<ReadIntoJob> StartReadInto(Store* store, const PositionArray& positions,
                                           const IdArray& ids, const IdArray& rows,
                                           const std::string& meta, uint64_t payload_bytes,
                                           const std::vector<uint64_t>& offsets,
                                           const std::vector<at::Tensor>& leaves);

// Store::Locate: 0 a miss, 1 in the RAM tier, 2 on the disk tier.
pybind11::array_t<uint8_t> LocateIds(Store* store, const IdArray& ids);

}  // namespace opt4store

#endif  // OPT4STORE_BINDINGS_BATCH_IO_H_
