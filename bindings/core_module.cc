// opt4store._core: the C++ Store for Python. The only translation unit that
// includes torch headers (about 30 s to compile on 2 cores).
//
// Values cross as tensors: Put takes a tensor's bytes (made contiguous, on
// the CPU) and a meta blob; Get allocates a fresh tensor, lets the store
// copy the bytes straight into it (no intermediate buffer), and views it
// with the dtype and shape the value header records. Nothing returned
// aliases the store's memory, so a caller may modify it freely.
//
// The GIL is released around every call into the store. A Status becomes
// an exception of opt4store's own classes (opt4store/_errors.py), looked up
// once at import.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "bindings/core_common.h"
#include "bindings/batch_io.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/read_sink.h"
#include "opt4store/sizes.h"
#include "opt4store/store.h"
#include "opt4store/value.h"

namespace py = pybind11;

namespace opt4store {
namespace {

// Exception classes from opt4store._errors, keyed by Status code.
struct ErrorClasses {
  py::object base, invalid, busy, no_space, corruption, not_found, out_of_range, io, stale;
};
ErrorClasses* g_errors = nullptr;

py::object ClassFor(const Status& s) {
  if (g_errors == nullptr) return py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
      return g_errors->invalid;
    case Status::Code::kBusy:
      return g_errors->busy;
    case Status::Code::kNoSpace:
      return g_errors->no_space;
    case Status::Code::kCorruption:
      return g_errors->corruption;
    case Status::Code::kNotFound:
      return g_errors->not_found;
    case Status::Code::kOutOfRange:
      return g_errors->out_of_range;
    case Status::Code::kIOError:
      return g_errors->io;
    case Status::Code::kStale:
      return g_errors->stale;
    default:
      return g_errors->base;
  }
}

// ---------------------------------------------------------------- stats

// Store.stats(): every field of the one table (store_stats.h), by its name.
py::dict StatsDict(const StoreStats& st) {
  py::dict d;
  VisitStats(st, [&d](const StatField& field, auto value) { d[field.name] = value; });
  return d;
}

// The table itself, for the docs check and a closed store's zeros.
// The settings table, for Store's keywords and the docs check.
py::list SettingFieldList() {
  py::list fields;
  for (const SettingField& field : SettingFields()) {
    const char* kind = field.kind == SettingKind::kBytes   ? "size"
                       : field.kind == SettingKind::kCount ? "count"
                                                           : "name";
    fields.append(py::make_tuple(field.name, kind, field.default_text, field.help));
  }
  return fields;
}

py::list StatFields() {
  py::list fields;
  VisitStats(StoreStats{}, [&fields](const StatField& field, auto) {
    fields.append(py::make_tuple(field.group, field.name, field.help));
  });
  return fields;
}

// ---------------------------------------------------------------- options

uint64_t GetUint(const py::dict& d, const char* key) { return d[key].cast<uint64_t>(); }

// The settings by their names in the table (store_options.h), each an int
// or a string that SetOption reads; then this open's own options.
StoreOptions OptionsFromDict(const py::dict& d) {
  StoreOptions o;
  auto has = [&d](const char* key) { return d.contains(key) && !d[key].is_none(); };
  if (has("dataset_size")) o.dataset_size = GetUint(d, "dataset_size");
  for (const SettingField& field : SettingFields()) {
    if (!has(field.name)) continue;
    const py::object value = d[field.name];
    const std::string text =
        py::isinstance<py::str>(value) ? value.cast<std::string>() : py::str(value).cast<std::string>();
    ThrowIfError(SetOption(field.name, text, &o));
  }
  if (has("fingerprint")) o.fingerprint = d["fingerprint"].cast<std::string>();
  if (has("reset")) o.reset = d["reset"].cast<bool>();
  if (has("create_if_missing")) o.create_if_missing = d["create_if_missing"].cast<bool>();
  if (has("fetch_timeout_ms")) o.fetch_timeout_ms = d["fetch_timeout_ms"].cast<int64_t>();
  if (has("direct_io")) o.direct_io = d["direct_io"].cast<bool>();
  if (has("shm_prefix")) o.shm_prefix = d["shm_prefix"].cast<std::string>();
  if (has("queue_bytes")) o.queue_bytes = GetUint(d, "queue_bytes");
  if (has("shm_free_bytes_for_testing")) {
    const uint64_t free_bytes = GetUint(d, "shm_free_bytes_for_testing");
    o.shm_free_space_for_testing = [free_bytes](const std::string&, uint64_t* out) {
      *out = free_bytes;
      return Status::OK();
    };
  }
  return o;
}

using IdsArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using Uint32Array = py::array_t<uint32_t, py::array::c_style>;

// Copies n ids to ItemIds, each checked against the dataset size, without
// the GIL: a plan of millions of ids is a few milliseconds of plain C++.
template <typename T>
std::vector<ItemId> CopyIds(const T* p, size_t n, uint64_t dataset_size, const char* what,
                            uint64_t first) {
  std::vector<ItemId> v(n);
  size_t bad = n;
  {
    py::gil_scoped_release release;
    for (size_t i = 0; i < n; ++i) {
      bool out = static_cast<uint64_t>(p[i]) >= dataset_size;
      if constexpr (std::is_signed_v<T>) out = out || p[i] < 0;
      if (out) {
        bad = i;
        break;
      }
      v[i] = static_cast<ItemId>(p[i]);
    }
  }
  if (bad != n) {
    ThrowIfError(Status::OutOfRange(std::string(what) + std::to_string(p[bad]) +
                                    " at position " + std::to_string(first + bad) +
                                    " is out of range for a dataset of " +
                                    std::to_string(dataset_size) + " items"));
  }
  return v;
}

// A 1-D array of ids as ItemIds (`what` and `first` name a bad index and
// its position in the message). A C-contiguous uint32 array (how
// PlannedSampler holds its epochs) is read as it is; anything else is
// converted to int64 first.
std::vector<ItemId> IdsFromArray(const py::array& ids, uint64_t dataset_size, const char* what,
                                 uint64_t first) {
  if (ids.ndim() != 1) ThrowIfError(Status::InvalidArgument("a plan is a 1-D array of indices"));
  if (Uint32Array::check_(ids) && (ids.flags() & py::array::c_style)) {
    auto a = py::reinterpret_borrow<Uint32Array>(ids);
    return CopyIds(a.data(), static_cast<size_t>(a.size()), dataset_size, what, first);
  }
  IdsArray a = IdsArray::ensure(ids);
  if (!a) throw py::error_already_set();
  return CopyIds(a.data(), static_cast<size_t>(a.size()), dataset_size, what, first);
}

// An explicit plan from 1-D arrays of ids, one after another (a sampler's
// epochs, without joining them in Python first): the whole plan, or
// (total_epochs > 0) epochs [first_epoch, ...) of an open plan of
// total_epochs epochs.
PlanSpec PlanFromArrays(const std::vector<py::array>& parts, uint64_t epoch_length,
                        uint64_t dataset_size, uint64_t total_epochs, uint64_t first_epoch) {
  auto ids = std::make_shared<std::vector<ItemId>>();
  size_t total = 0;
  for (const py::array& part : parts) total += static_cast<size_t>(part.size());
  ids->reserve(total);
  uint64_t position = first_epoch * epoch_length;
  for (const py::array& part : parts) {
    std::vector<ItemId> v = IdsFromArray(part, dataset_size, "the plan's index ", position);
    position += v.size();
    ids->insert(ids->end(), v.begin(), v.end());
  }
  PlanSpec spec;
  spec.kind = SamplerKind::kExplicit;
  spec.ids = std::move(ids);
  spec.epoch_length = epoch_length;
  spec.dataset_size = dataset_size;
  spec.total_epochs = total_epochs;
  spec.first_epoch = first_epoch;
  return spec;
}

// ---------------------------------------------------------------- the store

class PyStore {
 public:
  static std::unique_ptr<PyStore> Open(const std::string& path, const py::dict& options) {
    StoreOptions o = OptionsFromDict(options);
    std::unique_ptr<Store> store;
    Status s;
    {
      py::gil_scoped_release release;
      s = Store::Open(o, path, &store);
    }
    ThrowIfError(s);
    return std::unique_ptr<PyStore>(new PyStore(std::move(store)));
  }

  static std::unique_ptr<PyStore> Attach(const std::string& handle, bool rank_reader) {
    std::unique_ptr<Store> store;
    Status s;
    {
      py::gil_scoped_release release;
      s = rank_reader ? Store::AttachRankReader(handle, &store) : Store::Attach(handle, &store);
    }
    ThrowIfError(s);
    return std::unique_ptr<PyStore>(new PyStore(std::move(store)));
  }

  // None on a miss; a tensor for a tag-1 value (rebuilt from the header);
  // else (tag, meta bytes, uint8 payload tensor) for Python to decode.
  py::object Get(uint64_t position, int64_t id) {
    Store* store = Checked();
    if (id < 0) ThrowIfError(Status::OutOfRange("negative index " + std::to_string(id)));
    TensorSink sink;
    Status s;
    {
      py::gil_scoped_release release;
      s = store->Get(position, static_cast<ItemId>(id), &sink);
    }
    if (s.IsNotFound()) return py::none();
    ThrowIfError(s);
    return ValueObject(sink);
  }

  // Get without a position that counts nothing and leaves the tiers as
  // they were (Store::Peek): None when the store does not hold it.
  py::object Peek(int64_t id) {
    Store* store = Checked();
    if (id < 0) ThrowIfError(Status::OutOfRange("negative index " + std::to_string(id)));
    TensorSink sink;
    Status s;
    {
      py::gil_scoped_release release;
      s = store->Peek(static_cast<ItemId>(id), &sink);
    }
    if (s.IsNotFound()) return py::none();
    ThrowIfError(s);
    return ValueObject(sink);
  }

  // Stores a tensor as a tag-1 value.
  void PutTensor(uint64_t position, int64_t id, const at::Tensor& tensor) {
    Store* store = Checked();
    DType dtype = DType::kBytes;
    if (!FromScalar(tensor.scalar_type(), &dtype)) {
      ThrowIfError(Status::InvalidArgument(std::string("tensors of dtype ") +
                                           c10::toString(tensor.scalar_type()) +
                                           " cannot be stored"));
    }
    at::Tensor t = tensor.device().is_cpu() ? tensor : tensor.cpu();
    // The stored bytes are the values: apply a lazy conjugate or negation.
    t = t.resolve_conj().resolve_neg().contiguous();
    ValueHeader h;
    h.dtype = dtype;
    h.tag = 1;
    h.shape.assign(t.sizes().begin(), t.sizes().end());
    const std::string meta = EncodeValueHeader(h);
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    Status s;
    {
      py::gil_scoped_release release;
      s = store->Put(position, CheckedId(id),
                     meta, std::string_view(static_cast<const char*>(t.data_ptr()), bytes));
    }
    ThrowIfError(s);
  }

  // Stores an encoded value: meta from Python, payload from a contiguous
  // uint8 tensor (or anything with the buffer protocol).
  void PutEncoded(uint64_t position, int64_t id, py::bytes meta, py::buffer payload) {
    Store* store = Checked();
    std::string meta_bytes = meta;
    py::buffer_info info = payload.request();
    if (info.ndim > 1 && info.strides.back() != info.itemsize) {
      ThrowIfError(Status::InvalidArgument("the payload buffer is not contiguous"));
    }
    const uint64_t bytes = static_cast<uint64_t>(info.size) * info.itemsize;
    Status s;
    {
      py::gil_scoped_release release;
      s = store->Put(position, CheckedId(id), meta_bytes,
                     std::string_view(static_cast<const char*>(info.ptr), bytes));
    }
    ThrowIfError(s);
  }

  void SetPlan(const std::vector<py::array>& parts, uint64_t epoch_length, uint64_t start,
               uint64_t total_epochs, uint64_t first_epoch) {
    Store* store = Checked();
    PlanSpec spec =
        PlanFromArrays(parts, epoch_length, store->dataset_size(), total_epochs, first_epoch);
    Status s;
    {
      py::gil_scoped_release release;
      s = store->SetPlan(spec, start);
    }
    ThrowIfError(s);
  }

  // The next whole epochs of the open plan SetPlan(total_epochs > 0) gave.
  void AppendPlan(const py::array& ids) {
    Store* store = Checked();
    std::vector<ItemId> v =
        IdsFromArray(ids, store->dataset_size(), "the appended epochs' index ", 0);
    Status s;
    {
      py::gil_scoped_release release;
      s = store->AppendPlan(std::move(v));
    }
    ThrowIfError(s);
  }

  void MarkConsumed(uint64_t position, int64_t id) { Checked()->MarkConsumed(position, CheckedId(id)); }

  py::dict Stats() {
    if (!store_) return StatsDict(stats_at_close_);
    StoreStats st;
    {
      py::gil_scoped_release release;
      st = store_->Stats();
    }
    return StatsDict(st);
  }

  uint64_t ResumePosition() { return Checked()->ResumePosition(); }
  void BeginEpoch(uint64_t position) { Checked()->BeginEpoch(position); }
  uint64_t ReadingFrom() { return Checked()->ReadingFrom(); }
  bool FirstWarning(uint32_t kind) { return Checked()->FirstWarning(kind); }
  void CountPeerTraffic(uint64_t hits, uint64_t bytes_in, uint64_t bytes_out) {
    Checked()->CountPeerTraffic(hits, bytes_in, bytes_out);
  }
  // False when timeout_ms ran out (Busy).
  bool WaitForPuts(int64_t timeout_ms) {
    Store* store = Checked();
    Status s;
    {
      py::gil_scoped_release release;
      s = store->WaitForPuts(timeout_ms);
    }
    if (s.IsBusy()) return false;
    ThrowIfError(s);
    return true;
  }
  // None once every rank reader left; else why the wait gave up (Busy's
  // message, naming their pids).
  py::object WaitForRankReaders(uint32_t expected, int64_t timeout_ms) {
    Store* store = Checked();
    Status s;
    {
      py::gil_scoped_release release;
      s = store->WaitForRankReaders(expected, timeout_ms);
    }
    if (s.IsBusy()) return py::str(s.message());
    ThrowIfError(s);
    return py::none();
  }
  std::string Handle() { return Checked()->handle(); }
  bool IsOwner() { return Checked()->IsOwner(); }
  uint64_t DatasetSize() { return Checked()->dataset_size(); }

  void Flush() {
    Store* store = Checked();
    Status s;
    {
      py::gil_scoped_release release;
      s = store->Flush();
    }
    ThrowIfError(s);
  }

  void Close() {
    if (!store_) return;
    Status s;
    {
      py::gil_scoped_release release;
      s = store_->Close();
      stats_at_close_ = store_->Stats();  // the engine's view of a closed store
      store_.reset();
    }
    ThrowIfError(s);
  }

  bool closed() const { return store_ == nullptr; }

 Store* Checked() {
    if (!store_) ThrowIfError(Status::IOError("the store is closed"));
    return store_.get();
  }
 private:
  explicit PyStore(std::unique_ptr<Store> store) : store_(std::move(store)) {}
  ItemId CheckedId(int64_t id) {
    if (id < 0 || static_cast<uint64_t>(id) >= store_->dataset_size()) {
      ThrowIfError(Status::OutOfRange("index " + std::to_string(id) +
                                      " is out of range for a dataset of " +
                                      std::to_string(store_->dataset_size()) + " items"));
    }
    return static_cast<ItemId>(id);
  }

  std::unique_ptr<Store> store_;
  StoreStats stats_at_close_;  // Stats() after close(): the store's last, as it closed
};

// ---------------------------------------------------------------- values

py::bytes EncodeHeader(const std::string& dtype, const std::vector<int64_t>& shape, uint32_t tag,
                       py::bytes user) {
  ValueHeader h;
  ThrowIfError(ParseDType(dtype, &h.dtype));
  h.shape = shape;
  h.tag = tag;
  h.user = user;
  return py::bytes(EncodeValueHeader(h));
}

py::tuple DecodeHeader(py::bytes meta) {
  ValueHeader h;
  ThrowIfError(DecodeValueHeader(std::string(meta), &h));
  return py::make_tuple(std::string(DTypeName(h.dtype)), h.shape, h.tag, py::bytes(h.user));
}

// ---------------------------------------------------------------- plans

// PlannedSampler's fingerprint of its plan: PlanFingerprint (plan.h), the
// one an explicit plan's Describe() carries.
std::string PlanFingerprintOf(
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids) {
  if (ids.ndim() != 1) ThrowIfError(Status::InvalidArgument("a plan is a 1-D array of indices"));
  py::gil_scoped_release release;
  return PlanFingerprint(ids.data(), static_cast<size_t>(ids.size()));
}

// ---------------------------------------------------------------- sizes

// opt4store.parse_size of a string: the grammar of opt4store/sizes.h, the
// CLI's. name (the option's) prefixes the message of an error.
uint64_t ParseSizeText(const std::string& text, const std::string& name) {
  uint64_t bytes = 0;
  Status s = ParseSize(text, &bytes);
  if (!s.ok() && !name.empty()) s = s.WithContext(name);
  ThrowIfError(s);
  return bytes;
}

// A method of Store over batch_io.h's row calls (read_into, read_into_async,
// put_rows), which take the same arguments.
template <typename Call>
auto RowsCall(Call call) {
  return [call](PyStore& self, const PositionArray& positions,
                const IdArray& ids, const IdArray& rows, py::bytes meta,
                uint64_t payload_bytes, const std::vector<uint64_t>& offsets,
                const std::vector<at::Tensor>& leaves) {
    return call(self.Checked(), positions, ids, rows, meta, payload_bytes, offsets, leaves);
  };
}

}  // namespace
}  // namespace opt4store

PYBIND11_MODULE(_core, m) {
  using opt4store::PyStore;
  m.doc() = "opt4store's C++ store (see the opt4store package for the Python API)";

  // The error classes live in Python so that users can catch them by name.
  py::module_ errors = py::module_::import("opt4store._errors");
  static opt4store::ErrorClasses classes{
      errors.attr("Error"),       errors.attr("InvalidArgumentError"),
      errors.attr("BusyError"),   errors.attr("NoSpaceError"),
      errors.attr("CorruptionError"), errors.attr("NotFoundError"),
      errors.attr("OutOfRangeError"), errors.attr("IOError_"),
      errors.attr("StaleStoreError")};
  opt4store::g_errors = &classes;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const opt4store::StatusError& e) {
      py::object cls = opt4store::ClassFor(e.status);
      PyErr_SetString(cls.ptr(), e.status.ToString().c_str());
    }
  });

  py::class_<opt4store::ReadIntoJob>(m, "ReadIntoJob")
      .def("wait", &opt4store::ReadIntoJob::Wait);

  py::class_<PyStore>(m, "Store")
      .def_static("open", &PyStore::Open, py::arg("path"), py::arg("options"))
      .def_static("attach", &PyStore::Attach, py::arg("handle"), py::arg("rank_reader") = false)
      .def("get", &PyStore::Get, py::arg("position"), py::arg("index"))
      .def("peek", &PyStore::Peek, py::arg("index"))
      .def("put_tensor", &PyStore::PutTensor, py::arg("position"), py::arg("index"),
           py::arg("tensor"))
      .def("put_encoded", &PyStore::PutEncoded, py::arg("position"), py::arg("index"),
           py::arg("meta"), py::arg("payload"))
      .def("set_plan", &PyStore::SetPlan, py::arg("parts"), py::arg("epoch_length"),
           py::arg("start") = 0, py::arg("total_epochs") = 0, py::arg("first_epoch") = 0)
      .def("append_plan", &PyStore::AppendPlan, py::arg("ids"))
      .def("mark_consumed", &PyStore::MarkConsumed, py::arg("position"), py::arg("index"))
      .def(
          "get_batch",
          [](PyStore& self, const opt4store::PositionArray& positions, const opt4store::IdArray& ids) {
            return opt4store::GetBatchValues(self.Checked(), positions, ids);
          },
          py::arg("positions"), py::arg("indices"))
      .def("read_into", opt4store::RowsCall(&opt4store::ReadInto), py::arg("positions"), py::arg("indices"),
           py::arg("rows"), py::arg("meta"), py::arg("payload_bytes"), py::arg("offsets"),
           py::arg("leaves"))
      .def("read_into_async", opt4store::RowsCall(&opt4store::StartReadInto), py::arg("positions"),
           py::arg("indices"), py::arg("rows"), py::arg("meta"), py::arg("payload_bytes"),
           py::arg("offsets"), py::arg("leaves"))
      .def("put_rows", opt4store::RowsCall(&opt4store::PutRows), py::arg("positions"), py::arg("indices"),
           py::arg("rows"), py::arg("meta"), py::arg("payload_bytes"), py::arg("offsets"),
           py::arg("leaves"))
      .def(
          "locate",
          [](PyStore& self, const opt4store::IdArray& ids) {
            return opt4store::LocateIds(self.Checked(), ids);
          },
          py::arg("indices"))
      .def("stats", &PyStore::Stats)
      .def("resume_position", &PyStore::ResumePosition)
      .def("begin_epoch", &PyStore::BeginEpoch, py::arg("position"))
      .def("reading_from", &PyStore::ReadingFrom)
      .def(
          "consumed",
          [](PyStore& self, const opt4store::PositionArray& positions) {
            const opt4store::Store* store = self.Checked();
            py::array_t<bool> out(positions.size());
            auto in = positions.unchecked<1>();
            auto flags = out.mutable_unchecked<1>();
            for (py::ssize_t i = 0; i < in.shape(0); ++i) flags(i) = store->Consumed(in(i));
            return out;
          },
          py::arg("positions"))
      .def("first_warning", &PyStore::FirstWarning, py::arg("kind"))
      .def("count_peer_traffic", &PyStore::CountPeerTraffic, py::arg("hits") = 0,
           py::arg("bytes_in") = 0, py::arg("bytes_out") = 0)
      .def("wait_for_puts", &PyStore::WaitForPuts, py::arg("timeout_ms"))
      .def("wait_for_rank_readers", &PyStore::WaitForRankReaders, py::arg("expected"),
           py::arg("timeout_ms"))
      .def("handle", &PyStore::Handle)
      .def("is_owner", &PyStore::IsOwner)
      .def("dataset_size", &PyStore::DatasetSize)
      .def("flush", &PyStore::Flush)
      .def("close", &PyStore::Close)
      .def_property_readonly("closed", &PyStore::closed);

  m.def("encode_header", &opt4store::EncodeHeader, py::arg("dtype"), py::arg("shape"),
        py::arg("tag"), py::arg("user"));
  m.def("decode_header", &opt4store::DecodeHeader, py::arg("meta"));
  m.def("zero_stats", [] { return opt4store::StatsDict(opt4store::StoreStats{}); });
  m.def("stat_fields", &opt4store::StatFields);
  m.def("setting_fields", &opt4store::SettingFieldList);
  m.def(
      "check_options",
      [](const py::dict& options) {
        opt4store::ThrowIfError(opt4store::CheckGivenOptions(opt4store::OptionsFromDict(options)));
      },
      py::arg("options"));
  m.def("parse_size", &opt4store::ParseSizeText, py::arg("text"), py::arg("name") = "");
  m.def("plan_fingerprint", &opt4store::PlanFingerprintOf, py::arg("ids"));
  // Between a write to shared memory and a read of another word there:
  // two processes that each write one word and then read the other's
  // cannot both read the old value (opt4store/_job_list.py).
  m.def("memory_fence", [] { std::atomic_thread_fence(std::memory_order_seq_cst); });
  m.attr("NO_POSITION") = opt4store::kNoPosition;
  m.attr("MAX_META_BYTES") = opt4store::kMaxMetaBytes;
  m.attr("MAX_FETCH_TIMEOUT_MS") = opt4store::kMaxFetchTimeoutMs;
}
