// Plan: the order in which sample ids will be read, epoch by epoch.
//
// A PlanSpec names a plan; OpenPlanSource() turns it into a PlanSource that
// streams the ids in order. A generated plan (sequential, shuffle,
// replacement, distributed) is a pure function of
//   (kind, dataset_size, seed, epoch, rank, world_size, num_samples, drop_last)
// and holds O(dataset_size) memory however many epochs it spans. A file plan
// streams from disk; an explicit plan serves an in-memory vector (how the
// Python package hands over the order it recorded from a torch Sampler).
// An open explicit plan (PlanSpec::total_epochs) is given a few epochs at a
// time: it starts with the epochs in `ids` and takes each later epoch with
// PlanSource::Append, so that a long run never holds its whole plan.
//
// The generators, exactly (so that any implementation can reproduce them):
//   Mix64(z)         = SplitMix64's finalizer:
//                      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//                      z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//                      return z ^ (z >> 31)
//   EpochSeed(s, e)  = Mix64(s + 0x9E3779B97F4A7C15 * (e + 1))
//   Rng(x)           = SplitMix64 with state x: each draw adds
//                      0x9E3779B97F4A7C15 to the state and returns Mix64(state)
//   Below(n)         = Lemire's unbiased multiply-shift: m = draw * n (128-bit);
//                      redraw while low64(m) < (2^64 - n) mod n; return m >> 64
//   sequential       epoch e reads 0, 1, ..., N-1
//   shuffle          epoch e: p = [0, N); with Rng(EpochSeed(seed, e)),
//                    for i = N-1 down to 1: swap(p[i], p[Below(i + 1)])
//   replacement      epoch e: num_samples draws Below(N) from Rng(EpochSeed(seed, e))
//   distributed      torch.utils.data.DistributedSampler's semantics over the
//                    shuffle permutation above: total = ceil(N/W)*W with the
//                    permutation padded by wrapping around its start, or, with
//                    drop_last, floor(N/W)*W; rank r reads total[r], total[r+W], ...
//                    With W = 1 it equals shuffle.
//
// Thread safety: a PlanSpec is a value. A PlanSource is not thread-safe; use
// one per thread.
#ifndef OPT4STORE_PLAN_H_
#define OPT4STORE_PLAN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/status.h"

namespace opt4store {

// Sample ids are 32-bit: a dataset holds at most 2^32 - 1 items.
using ItemId = uint32_t;
constexpr uint64_t kMaxDatasetSize = 0xFFFFFFFFull;

enum class SamplerKind {
  kSequential,
  kShuffle,
  kReplacement,
  kDistributed,
  kFile,      // an id file: text, .u32, .u64 or .npy (see number_file.h)
  kExplicit,  // an in-memory sequence
};

const char* SamplerName(SamplerKind kind);
// Accepts "sequential", "shuffle", "replacement", "distributed", "file".
Status ParseSamplerKind(std::string_view name, SamplerKind* kind);

struct PlanSpec {
  SamplerKind kind = SamplerKind::kShuffle;

  // N: ids are in [0, N). For file and explicit plans 0 means "max id + 1";
  // a non-zero value is checked against every id.
  uint64_t dataset_size = 0;

  // Generated plans only.
  uint64_t epochs = 1;
  uint64_t seed = 0;
  uint64_t num_samples = 0;  // replacement: draws per epoch; 0 means N
  uint32_t world_size = 1;   // distributed
  uint32_t rank = 0;         // distributed
  bool drop_last = false;    // distributed

  // File plans.
  std::string path;

  // Explicit plans. Shared so that copying a spec is cheap.
  std::shared_ptr<const std::vector<ItemId>> ids;

  // File and explicit plans: reads per epoch; 0 means the whole sequence is
  // one epoch, except a 2-D .npy file, whose rows are the epochs. It must
  // divide the number of reads.
  uint64_t epoch_length = 0;

  // Open explicit plans: the plan has total_epochs epochs of epoch_length
  // reads (epoch_length must be given), `ids` holds epochs
  // [first_epoch, first_epoch + ids->size() / epoch_length) of them, and the
  // later ones come with PlanSource::Append (Store::AppendPlan). Positions
  // still count from epoch 0. 0 means `ids` is the whole plan.
  uint64_t total_epochs = 0;
  uint64_t first_epoch = 0;

  // A canonical one-line description, e.g.
  // "shuffle n=1000 epochs=3 seed=7". Two specs that describe the same
  // generated plan give the same string.
  std::string Describe() const;
};

// What a plan looks like, known before the first id is read.
struct PlanShape {
  uint64_t dataset_size = 0;  // N (inferred for file plans when not given)
  uint64_t epochs = 0;
  uint64_t epoch_length = 0;  // reads per epoch
  uint64_t total_reads = 0;   // epochs * epoch_length
};

// Streams a plan's ids in order.
class PlanSource {
 public:
  virtual ~PlanSource() = default;
  PlanSource(const PlanSource&) = delete;
  PlanSource& operator=(const PlanSource&) = delete;

  const PlanShape& shape() const { return shape_; }

  // The position of the first id Read() gives: 0, except for an open
  // explicit plan given from a later epoch (PlanSpec::first_epoch).
  uint64_t first_position() const { return first_position_; }
  // One past the last position Read() can give now: shape().total_reads,
  // except for an open explicit plan whose later epochs are not yet
  // appended.
  uint64_t known_end() const { return std::min(known_end_, shape_.total_reads); }

  // Writes up to `max` next ids to out[0..*count). *count == 0 means the plan
  // is exhausted (or, for an open plan, that nothing more is known yet:
  // see known_end()). Returns an error for a file that changed or broke
  // since it was opened; later calls keep returning it.
  virtual Status Read(ItemId* out, size_t max, size_t* count) = 0;

  // Appends the next whole epochs of an open explicit plan: ids.size() a
  // multiple of epoch_length, not past total_reads, every id below the
  // dataset size. Returns InvalidArgument for any other plan or a wrong
  // count, OutOfRange for an id (naming its position); on error nothing
  // is appended.
  virtual Status Append(std::vector<ItemId> ids);

 protected:
  PlanSource() = default;
  PlanShape shape_;
  uint64_t first_position_ = 0;
  uint64_t known_end_ = UINT64_MAX;  // clamped to total_reads by known_end()
};

// Validates the spec (a file plan is scanned once, so that a malformed line
// is reported here with its line number or byte offset) and opens a source.
// On success *source is set; on error it is left empty.
Status OpenPlanSource(const PlanSpec& spec, std::unique_ptr<PlanSource>* source);

// The same generators, one epoch at a time, for tests and tools.
// REQUIRES: spec.kind is generated (not file or explicit); spec validated.
void GenerateEpoch(const PlanSpec& spec, uint64_t epoch, std::vector<ItemId>* out);

// A plan's fingerprint: names a sequence of ids without storing it. An
// explicit plan's Describe() carries it ("fingerprint=..."), and Python's
// PlannedSampler keys its state_dict with it (_core.plan_fingerprint), so
// the two always agree. The algorithm, exactly:
//   64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3:
//   for each byte, h ^= byte, then h *= prime) over these bytes:
//     the number of ids, as an unsigned 64-bit integer, little-endian;
//     then each id as an unsigned 64-bit integer, little-endian (a negative
//     int64 as its two's complement);
//   written as 16 lowercase hex digits, most significant first.
// Hashing the length first keeps a sequence and its extension apart even
// where the extension's bytes would hash back to the same state.
// Not a cryptographic hash: it tells plans apart, it does not authenticate.
std::string PlanFingerprint(const ItemId* ids, size_t count);
std::string PlanFingerprint(const int64_t* ids, size_t count);

// SplitMix64 helpers shared by the generators and the random policy.
uint64_t Mix64(uint64_t z);
uint64_t EpochSeed(uint64_t seed, uint64_t epoch);

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() { return Mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_;
};

}  // namespace opt4store

#endif  // OPT4STORE_PLAN_H_
