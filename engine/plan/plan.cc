#include "opt4store/plan.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <numeric>

#include "opt4store/number_file.h"

namespace opt4store {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr size_t kFileChunk = 1 << 16;

// Reads per epoch of rank r under DistributedSampler's rules.
uint64_t DistributedEpochLength(uint64_t n, uint32_t world, bool drop_last) {
  return drop_last ? n / world : (n + world - 1) / world;
}

void Shuffle(uint64_t n, uint64_t seed, uint64_t epoch, std::vector<ItemId>* out) {
  out->resize(n);
  std::iota(out->begin(), out->end(), ItemId{0});
  SplitMix64 rng(EpochSeed(seed, epoch));
  for (uint64_t i = n - 1; i > 0 && n > 1; --i) {
    std::swap((*out)[i], (*out)[rng.Below(i + 1)]);
  }
}

Status ValidateGenerated(const PlanSpec& spec, PlanShape* shape) {
  if (spec.dataset_size == 0) return Status::InvalidArgument("dataset size must be at least 1");
  if (spec.dataset_size > kMaxDatasetSize) {
    return Status::InvalidArgument("dataset size " + std::to_string(spec.dataset_size) +
                                   " exceeds the maximum of 2^32-1 items");
  }
  if (spec.epochs == 0) return Status::InvalidArgument("epochs must be at least 1");
  shape->dataset_size = spec.dataset_size;
  shape->epochs = spec.epochs;
  switch (spec.kind) {
    case SamplerKind::kSequential:
    case SamplerKind::kShuffle:
      shape->epoch_length = spec.dataset_size;
      break;
    case SamplerKind::kReplacement:
      shape->epoch_length = spec.num_samples ? spec.num_samples : spec.dataset_size;
      break;
    case SamplerKind::kDistributed:
      if (spec.world_size == 0) return Status::InvalidArgument("world size must be at least 1");
      if (spec.rank >= spec.world_size) {
        return Status::InvalidArgument("rank " + std::to_string(spec.rank) +
                                       " is not below world size " +
                                       std::to_string(spec.world_size));
      }
      shape->epoch_length =
          DistributedEpochLength(spec.dataset_size, spec.world_size, spec.drop_last);
      if (shape->epoch_length == 0) {
        return Status::InvalidArgument("with drop_last, a dataset of " +
                                       std::to_string(spec.dataset_size) +
                                       " items gives no reads to each of " +
                                       std::to_string(spec.world_size) + " ranks");
      }
      break;
    default:
      return Status::InvalidArgument("not a generated sampler");
  }
  if (shape->epoch_length > (uint64_t{1} << 62) / spec.epochs) {
    return Status::InvalidArgument("plan too long: epochs x reads per epoch overflows");
  }
  shape->total_reads = shape->epochs * shape->epoch_length;
  return Status::OK();
}

// Splits `reads` into epochs, given the requested epoch length (0 = one epoch,
// or the rows of a 2-D .npy file).
Status ShapeEpochs(uint64_t reads, uint64_t epoch_length, uint64_t rows, PlanShape* shape) {
  shape->total_reads = reads;
  if (epoch_length == 0 && rows > 0) epoch_length = reads / rows;
  if (epoch_length == 0) epoch_length = reads;
  if (reads == 0) {
    shape->epochs = 0;
    shape->epoch_length = 0;
    return Status::OK();
  }
  if (reads % epoch_length != 0) {
    return Status::InvalidArgument("epoch length " + std::to_string(epoch_length) +
                                   " does not divide the plan's " + std::to_string(reads) +
                                   " reads");
  }
  shape->epoch_length = epoch_length;
  shape->epochs = reads / epoch_length;
  return Status::OK();
}

class GeneratedSource final : public PlanSource {
 public:
  GeneratedSource(const PlanSpec& spec, const PlanShape& shape) : spec_(spec) { shape_ = shape; }

  Status Read(ItemId* out, size_t max, size_t* count) override {
    size_t n = 0;
    while (n < max && epoch_ < shape_.epochs) {
      if (index_ == shape_.epoch_length) {
        ++epoch_;
        index_ = 0;
        epoch_ready_ = false;
        continue;
      }
      if (!epoch_ready_) {
        GenerateEpoch(spec_, epoch_, &buffer_);
        epoch_ready_ = true;
      }
      size_t take = static_cast<size_t>(
          std::min<uint64_t>(max - n, shape_.epoch_length - index_));
      std::copy_n(buffer_.begin() + static_cast<ptrdiff_t>(index_), take, out + n);
      n += take;
      index_ += take;
    }
    *count = n;
    return Status::OK();
  }

 private:
  PlanSpec spec_;
  uint64_t epoch_ = 0;
  uint64_t index_ = 0;
  bool epoch_ready_ = false;
  std::vector<ItemId> buffer_;
};

class FileSource final : public PlanSource {
 public:
  FileSource(std::unique_ptr<NumberFileReader> reader, const PlanShape& shape)
      : reader_(std::move(reader)) {
    shape_ = shape;
  }

  Status Read(ItemId* out, size_t max, size_t* count) override {
    *count = 0;
    OPT4STORE_RETURN_IF_ERROR(status_);
    max = std::min(max, kFileChunk);
    values_.resize(max);
    size_t got = 0;
    status_ = reader_->Read(values_.data(), max, &got, shape_.dataset_size - 1);
    if (!status_.ok()) return status_;
    if (delivered_ + got > shape_.total_reads) {
      status_ = Status::Corruption("plan file grew since it was opened");
      return status_;
    }
    for (size_t i = 0; i < got; ++i) out[i] = static_cast<ItemId>(values_[i]);
    delivered_ += got;
    if (got == 0 && delivered_ != shape_.total_reads) {
      status_ = Status::Corruption("plan file shrank since it was opened");
      return status_;
    }
    *count = got;
    return Status::OK();
  }

 private:
  std::unique_ptr<NumberFileReader> reader_;
  std::vector<uint64_t> values_;
  uint64_t delivered_ = 0;
  Status status_;
};

class ExplicitSource final : public PlanSource {
 public:
  ExplicitSource(std::shared_ptr<const std::vector<ItemId>> ids, const PlanShape& shape,
                 uint64_t first_position, bool open) {
    shape_ = shape;
    first_position_ = first_position;
    known_end_ = first_position + ids->size();
    open_ = open;
    chunks_.push_back(std::move(ids));
  }

  Status Read(ItemId* out, size_t max, size_t* count) override {
    size_t n = 0;
    while (n < max && !chunks_.empty()) {
      const std::vector<ItemId>& front = *chunks_.front();
      const size_t take = std::min(max - n, front.size() - next_);
      std::copy_n(front.begin() + static_cast<ptrdiff_t>(next_), take, out + n);
      n += take;
      next_ += take;
      if (next_ == front.size()) {  // read: let it go (an open plan's epochs)
        chunks_.pop_front();
        next_ = 0;
      }
    }
    *count = n;
    return Status::OK();
  }

  Status Append(std::vector<ItemId> ids) override {
    if (!open_) {
      return Status::InvalidArgument(
          "only an open explicit plan (PlanSpec::total_epochs) takes appended epochs");
    }
    const uint64_t length = shape_.epoch_length;
    if (ids.empty() || ids.size() % length != 0) {
      return Status::InvalidArgument("appended " + std::to_string(ids.size()) +
                                     " reads: not whole epochs of " + std::to_string(length));
    }
    if (known_end_ + ids.size() > shape_.total_reads) {
      return Status::InvalidArgument(
          "appended reads up to position " + std::to_string(known_end_ + ids.size()) +
          " run past the plan's " + std::to_string(shape_.total_reads) + " reads (" +
          std::to_string(shape_.epochs) + " epochs)");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= shape_.dataset_size) {
        return Status::OutOfRange("plan position " + std::to_string(known_end_ + i) + ": id " +
                                  std::to_string(ids[i]) + " is not below the dataset size " +
                                  std::to_string(shape_.dataset_size));
      }
    }
    known_end_ += ids.size();
    chunks_.push_back(std::make_shared<const std::vector<ItemId>>(std::move(ids)));
    return Status::OK();
  }

 private:
  std::deque<std::shared_ptr<const std::vector<ItemId>>> chunks_;  // unread, in order
  size_t next_ = 0;  // in chunks_.front()
  bool open_ = false;
};

Status OpenFileSource(const PlanSpec& spec, std::unique_ptr<PlanSource>* source) {
  if (spec.path.empty()) return Status::InvalidArgument("file plan without a path");
  if (spec.dataset_size > kMaxDatasetSize) {
    return Status::InvalidArgument("dataset size exceeds the maximum of 2^32-1 items");
  }
  const uint64_t max_id = spec.dataset_size ? spec.dataset_size - 1 : kMaxDatasetSize - 1;
  NumberFileSummary summary;
  Status status = SummarizeNumberFile(spec.path, max_id, &summary);
  if (status.IsOutOfRange() && spec.dataset_size) {
    return Status::OutOfRange(status.message() + " (ids must be below the dataset size " +
                              std::to_string(spec.dataset_size) + ")");
  }
  OPT4STORE_RETURN_IF_ERROR(status);
  if (summary.count == 0) return Status::InvalidArgument(spec.path + ": plan holds no reads");
  PlanShape shape;
  shape.dataset_size = spec.dataset_size ? spec.dataset_size : summary.max_value + 1;
  OPT4STORE_RETURN_IF_ERROR(
      ShapeEpochs(summary.count, spec.epoch_length, summary.npy_rows, &shape)
          .WithContext(spec.path));
  std::unique_ptr<NumberFileReader> reader;
  OPT4STORE_RETURN_IF_ERROR(NumberFileReader::Open(spec.path, &reader));
  source->reset(new FileSource(std::move(reader), shape));
  return Status::OK();
}

Status OpenExplicitSource(const PlanSpec& spec, std::unique_ptr<PlanSource>* source) {
  if (!spec.ids || spec.ids->empty()) return Status::InvalidArgument("plan holds no reads");
  if (spec.dataset_size > kMaxDatasetSize) {
    return Status::InvalidArgument("dataset size exceeds the maximum of 2^32-1 items");
  }
  const std::vector<ItemId>& ids = *spec.ids;
  PlanShape shape;
  if (spec.dataset_size) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= spec.dataset_size) {
        return Status::OutOfRange("plan position " + std::to_string(i) + ": id " +
                                  std::to_string(ids[i]) + " is not below the dataset size " +
                                  std::to_string(spec.dataset_size));
      }
    }
    shape.dataset_size = spec.dataset_size;
  } else {
    ItemId max_id = *std::max_element(ids.begin(), ids.end());
    if (max_id == UINT32_MAX) return Status::OutOfRange("id 2^32-1 is reserved");
    shape.dataset_size = uint64_t{max_id} + 1;
  }
  if (spec.total_epochs == 0) {
    OPT4STORE_RETURN_IF_ERROR(ShapeEpochs(ids.size(), spec.epoch_length, 0, &shape));
    source->reset(new ExplicitSource(spec.ids, shape, 0, false));
    return Status::OK();
  }
  // An open plan: its shape is the whole run; ids are its first epochs.
  const uint64_t length = spec.epoch_length;
  if (length == 0 || ids.size() % length != 0) {
    return Status::InvalidArgument("an open explicit plan needs an epoch length (" +
                                   std::to_string(length) + ") that divides its " +
                                   std::to_string(ids.size()) + " reads");
  }
  const uint64_t given = ids.size() / length;
  if (spec.first_epoch + given > spec.total_epochs ||
      spec.total_epochs > UINT64_MAX / length) {
    return Status::InvalidArgument(
        "an open explicit plan holds epochs " + std::to_string(spec.first_epoch) + " to " +
        std::to_string(spec.first_epoch + given - 1) + " of " +
        std::to_string(spec.total_epochs));
  }
  shape.epoch_length = length;
  shape.epochs = spec.total_epochs;
  shape.total_reads = spec.total_epochs * length;
  source->reset(new ExplicitSource(spec.ids, shape, spec.first_epoch * length, true));
  return Status::OK();
}

}  // namespace

Status PlanSource::Append(std::vector<ItemId> ids) {
  (void)ids;
  return Status::InvalidArgument(
      "only an open explicit plan (PlanSpec::total_epochs) takes appended epochs");
}

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t EpochSeed(uint64_t seed, uint64_t epoch) { return Mix64(seed + kGolden * (epoch + 1)); }

uint64_t SplitMix64::Below(uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;  // (2^64 - n) mod n
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

const char* SamplerName(SamplerKind kind) {
  switch (kind) {
    case SamplerKind::kSequential: return "sequential";
    case SamplerKind::kShuffle: return "shuffle";
    case SamplerKind::kReplacement: return "replacement";
    case SamplerKind::kDistributed: return "distributed";
    case SamplerKind::kFile: return "file";
    case SamplerKind::kExplicit: return "explicit";
  }
  return "unknown";
}

Status ParseSamplerKind(std::string_view name, SamplerKind* kind) {
  for (SamplerKind k : {SamplerKind::kSequential, SamplerKind::kShuffle,
                        SamplerKind::kReplacement, SamplerKind::kDistributed,
                        SamplerKind::kFile}) {
    if (name == SamplerName(k)) {
      *kind = k;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("unknown sampler '" + std::string(name) +
                                 "' (expected sequential, shuffle, replacement, distributed "
                                 "or file)");
}

namespace {

// PlanFingerprint's FNV-1a (plan.h), fed 64-bit little-endian words.
class Fnv1a64 {
 public:
  void AddWord(uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (word >> (8 * i)) & 0xFF;
      hash_ *= 0x100000001b3ull;
    }
  }
  std::string Hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash_));
    return buf;
  }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

template <typename Id>
std::string Fingerprint(const Id* ids, size_t count) {
  Fnv1a64 fnv;
  fnv.AddWord(count);
  for (size_t i = 0; i < count; ++i) fnv.AddWord(static_cast<uint64_t>(ids[i]));
  return fnv.Hex();
}

}  // namespace

std::string PlanFingerprint(const ItemId* ids, size_t count) { return Fingerprint(ids, count); }

std::string PlanFingerprint(const int64_t* ids, size_t count) { return Fingerprint(ids, count); }

std::string PlanSpec::Describe() const {
  std::string s = SamplerName(kind);
  auto add = [&s](const char* key, const std::string& value) {
    s += ' ';
    s += key;
    s += '=';
    s += value;
  };
  switch (kind) {
    case SamplerKind::kFile:
      add("path", path);
      if (dataset_size) add("n", std::to_string(dataset_size));
      break;
    case SamplerKind::kExplicit: {
      const size_t reads = ids ? ids->size() : 0;
      add("reads", std::to_string(reads));
      add("fingerprint", PlanFingerprint(ids ? ids->data() : nullptr, reads));
      if (dataset_size) add("n", std::to_string(dataset_size));
      if (total_epochs) {  // open: ids are epochs from first_epoch on
        add("epochs", std::to_string(total_epochs));
        add("first_epoch", std::to_string(first_epoch));
      }
      break;
    }
    default:
      add("n", std::to_string(dataset_size));
      add("epochs", std::to_string(epochs));
      if (kind != SamplerKind::kSequential) add("seed", std::to_string(seed));
      if (kind == SamplerKind::kReplacement) {
        add("num_samples", std::to_string(num_samples ? num_samples : dataset_size));
      }
      if (kind == SamplerKind::kDistributed) {
        add("world", std::to_string(world_size));
        add("rank", std::to_string(rank));
        add("drop_last", drop_last ? "1" : "0");
      }
      return s;
  }
  if (epoch_length) add("epoch_length", std::to_string(epoch_length));
  return s;
}

void GenerateEpoch(const PlanSpec& spec, uint64_t epoch, std::vector<ItemId>* out) {
  const uint64_t n = spec.dataset_size;
  switch (spec.kind) {
    case SamplerKind::kSequential:
      out->resize(n);
      std::iota(out->begin(), out->end(), ItemId{0});
      return;
    case SamplerKind::kShuffle:
      Shuffle(n, spec.seed, epoch, out);
      return;
    case SamplerKind::kReplacement: {
      const uint64_t k = spec.num_samples ? spec.num_samples : n;
      out->resize(k);
      SplitMix64 rng(EpochSeed(spec.seed, epoch));
      for (uint64_t i = 0; i < k; ++i) (*out)[i] = static_cast<ItemId>(rng.Below(n));
      return;
    }
    case SamplerKind::kDistributed: {
      std::vector<ItemId> perm;
      Shuffle(n, spec.seed, epoch, &perm);
      const uint64_t w = spec.world_size;
      const uint64_t per_rank = DistributedEpochLength(n, spec.world_size, spec.drop_last);
      out->resize(per_rank);
      // Element k of the padded (or truncated) list is perm[k mod n].
      for (uint64_t i = 0; i < per_rank; ++i) (*out)[i] = perm[(spec.rank + i * w) % n];
      return;
    }
    default:
      out->clear();
      return;
  }
}

Status OpenPlanSource(const PlanSpec& spec, std::unique_ptr<PlanSource>* source) {
  source->reset();
  switch (spec.kind) {
    case SamplerKind::kFile:
      return OpenFileSource(spec, source);
    case SamplerKind::kExplicit:
      return OpenExplicitSource(spec, source);
    default: {
      PlanShape shape;
      OPT4STORE_RETURN_IF_ERROR(ValidateGenerated(spec, &shape));
      source->reset(new GeneratedSource(spec, shape));
      return Status::OK();
    }
  }
}

}  // namespace opt4store
