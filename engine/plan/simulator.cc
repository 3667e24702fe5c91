#include "opt4store/simulator.h"

#include <algorithm>
#include <chrono>

#include "opt4store/next_use.h"
#include "opt4store/ram_units.h"

namespace opt4store {

namespace {

constexpr size_t kBlock = 4096;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Status OpenStream(const SimulationOptions& options, std::unique_ptr<NextUseStream>* stream) {
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(options.plan, &source));
  return NextUseStream::Open(std::move(source), options.window, stream);
}

bool BytesMode(const ItemSizes& sizes) { return sizes.num_ids() != 0; }

Status Validate(const SimulationOptions& options, const PlanShape& shape) {
  if (options.policies.empty()) return Status::InvalidArgument("no policy to simulate");
  if (options.capacities.empty()) return Status::InvalidArgument("no capacity given");
  if (BytesMode(options.sizes)) {
    if (options.sizes.num_ids() != shape.dataset_size) {
      return Status::InvalidArgument(
          "sizes cover " + std::to_string(options.sizes.num_ids()) +
          " items, but the dataset has " + std::to_string(shape.dataset_size));
    }
    for (uint64_t c : options.capacities) {
      if (c > options.sizes.Total()) {
        return Status::InvalidArgument("capacity of " + std::to_string(c) +
                                       " bytes is larger than the dataset's " +
                                       std::to_string(options.sizes.Total()) + " bytes");
      }
    }
  } else {
    for (uint64_t c : options.capacities) {
      if (c > shape.dataset_size) {
        return Status::InvalidArgument("capacity of " + std::to_string(c) +
                                       " items is larger than the dataset's " +
                                       std::to_string(shape.dataset_size) + " items");
      }
    }
  }
  return Status::OK();
}

// One pass of the plan through every policy at one capacity. Reads are
// buffered in blocks so that each policy's share of the time is measured
// without a clock call per read.
Status RunPass(const SimulationOptions& options, uint64_t capacity,
               const std::vector<PolicyKind>& kinds, SimulationResult* result,
               std::vector<PolicyResult>* out) {
  std::unique_ptr<NextUseStream> stream;
  OPT4STORE_RETURN_IF_ERROR(OpenStream(options, &stream));
  result->window = stream->window();
  result->exact_window = stream->covers_whole_plan();

  std::vector<std::unique_ptr<Policy>> policies;
  for (PolicyKind kind : kinds) {
    PolicyOptions po;
    po.kind = kind;
    po.capacity = capacity;
    po.num_ids = stream->shape().dataset_size;
    po.window = stream->window();
    po.seed = options.seed;
    // The simulator never asks which ids are resident or were evicted.
    po.track_ids = BytesMode(options.sizes);
    policies.emplace_back();
    OPT4STORE_RETURN_IF_ERROR(NewPolicy(po, &policies.back()));
  }
  out->assign(kinds.size(), PolicyResult());
  for (size_t i = 0; i < kinds.size(); ++i) (*out)[i].kind = kinds[i];

  std::vector<Access> accesses(kBlock);
  std::vector<StepReveal> reveals;
  std::vector<uint64_t> costs(kBlock);
  std::vector<uint64_t> sizes(kBlock);
  std::vector<uint8_t> hits(kBlock);
  const bool uniform_cost = !BytesMode(options.sizes);
  const uint64_t unit = options.ram_units ? RamUnitBytes(capacity) : 0;
  uint64_t bytes_read = 0;
  uint64_t total = 0;
  for (;;) {
    reveals.clear();
    const size_t n = stream->NextBatch(accesses.data(), kBlock, &reveals);
    if (n == 0) break;
    if (!uniform_cost) {
      for (size_t i = 0; i < n; ++i) {
        sizes[i] = options.sizes.Size(accesses[i].id);
        costs[i] = unit ? InRamUnits(sizes[i], unit) : sizes[i];
        bytes_read += sizes[i];
      }
    } else {
      bytes_read += n;
    }
    total += n;
    for (size_t p = 0; p < policies.size(); ++p) {
      Policy& policy = *policies[p];
      PolicyResult& r = (*out)[p];
      const uint64_t hits_before = policy.counters().hits;
      const Clock::time_point start = Clock::now();
      policy.StepBatch(accesses.data(), n, uniform_cost ? nullptr : costs.data(),
                       reveals.data(), reveals.size(), uniform_cost ? nullptr : hits.data());
      r.seconds += SecondsSince(start);
      if (uniform_cost) {
        r.bytes_hit += policy.counters().hits - hits_before;
      } else {
        for (size_t i = 0; i < n; ++i) {
          if (hits[i]) r.bytes_hit += sizes[i];
        }
      }
    }
  }
  OPT4STORE_RETURN_IF_ERROR(stream->status());
  for (size_t p = 0; p < policies.size(); ++p) {
    (*out)[p].counters = policies[p]->counters();
    (*out)[p].bytes_read = bytes_read;
  }
  result->accesses = total;
  result->distinct_ids = stream->distinct_ids();
  return Status::OK();
}

// Fenwick tree over a compacted timeline of "last read" marks: at most one
// mark per id, renumbered when the timeline fills, so memory is O(ids).
class StackDistanceCounter {
 public:
  explicit StackDistanceCounter(uint64_t num_ids)
      : capacity_(2 * num_ids + 64), tree_(capacity_ + 1, 0), owner_(capacity_, kNone),
        stamp_(num_ids, kNone) {}

  // Returns the LRU stack depth of this read (1 = most recent), or 0 for a
  // first read.
  uint64_t Read(ItemId id) {
    uint64_t depth = 0;
    if (stamp_[id] != kNone) {
      depth = active_ - Prefix(stamp_[id]) + 1;
      Add(stamp_[id], -1);
      owner_[stamp_[id]] = kNone;
      --active_;
    }
    if (next_stamp_ == capacity_) Compact();
    stamp_[id] = next_stamp_;
    owner_[next_stamp_] = id;
    Add(next_stamp_++, +1);
    ++active_;
    return depth;
  }

 private:
  static constexpr uint64_t kNone = UINT64_MAX;

  // Number of marks at stamps <= s.
  uint64_t Prefix(uint64_t s) const {
    int64_t sum = 0;
    for (uint64_t i = s + 1; i > 0; i -= i & (~i + 1)) sum += tree_[i];
    return static_cast<uint64_t>(sum);
  }
  void Add(uint64_t s, int64_t delta) {
    for (uint64_t i = s + 1; i <= capacity_; i += i & (~i + 1)) tree_[i] += delta;
  }
  void Compact() {
    std::fill(tree_.begin(), tree_.end(), 0);
    uint64_t next = 0;
    for (uint64_t s = 0; s < capacity_; ++s) {
      if (owner_[s] == kNone) continue;
      const uint64_t id = owner_[s];
      owner_[s] = kNone;
      owner_[next] = id;
      stamp_[id] = next;
      Add(next++, +1);
    }
    next_stamp_ = next;
  }

  const uint64_t capacity_;
  std::vector<int64_t> tree_;
  std::vector<uint64_t> owner_;
  std::vector<uint64_t> stamp_;
  uint64_t next_stamp_ = 0;
  uint64_t active_ = 0;
};

}  // namespace

Status LruHitCurve(const PlanSpec& plan, const std::vector<uint64_t>& capacities,
                   std::vector<uint64_t>* hits) {
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(plan, &source));
  const uint64_t n = source->shape().dataset_size;
  StackDistanceCounter counter(n);
  std::vector<uint64_t> by_depth(n + 2, 0);
  std::vector<ItemId> chunk(kBlock);
  for (;;) {
    size_t got = 0;
    OPT4STORE_RETURN_IF_ERROR(source->Read(chunk.data(), chunk.size(), &got));
    if (got == 0) break;
    for (size_t i = 0; i < got; ++i) ++by_depth[counter.Read(chunk[i])];
  }
  // A read at depth d hits in every cache of at least d items.
  std::vector<uint64_t> cumulative(n + 2, 0);
  for (uint64_t d = 1; d <= n; ++d) cumulative[d] = cumulative[d - 1] + by_depth[d];
  hits->clear();
  for (uint64_t c : capacities) hits->push_back(cumulative[std::min(c, n)]);
  return Status::OK();
}

Status Simulate(const SimulationOptions& options, SimulationResult* result) {
  *result = SimulationResult();
  std::unique_ptr<PlanSource> probe;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(options.plan, &probe));
  result->shape = probe->shape();
  probe.reset();
  OPT4STORE_RETURN_IF_ERROR(Validate(options, result->shape));

  // With several item capacities, lru comes from one Mattson pass.
  const bool lru_by_stack = options.capacities.size() > 1 && !BytesMode(options.sizes);
  std::vector<PolicyKind> pass_kinds;
  for (PolicyKind k : options.policies) {
    if (!(lru_by_stack && k == PolicyKind::kLru)) pass_kinds.push_back(k);
  }
  std::vector<uint64_t> lru_hits;
  double lru_seconds = 0;
  if (lru_by_stack && pass_kinds.size() != options.policies.size()) {
    const Clock::time_point start = Clock::now();
    OPT4STORE_RETURN_IF_ERROR(LruHitCurve(options.plan, options.capacities, &lru_hits));
    lru_seconds = SecondsSince(start) / static_cast<double>(options.capacities.size());
  }

  for (size_t c = 0; c < options.capacities.size(); ++c) {
    const uint64_t capacity = options.capacities[c];
    std::vector<PolicyResult> pass;
    OPT4STORE_RETURN_IF_ERROR(
        RunPass(options, capacity, pass_kinds, result, &pass));
    CapacityResult point;
    point.capacity = capacity;
    size_t next_pass = 0;
    for (PolicyKind k : options.policies) {
      if (lru_by_stack && k == PolicyKind::kLru) {
        PolicyResult r;
        r.kind = k;
        const uint64_t hits = lru_hits[c];
        const uint64_t misses = result->accesses - hits;
        r.counters.hits = hits;
        r.counters.misses = misses;
        r.counters.admissions = capacity > 0 ? misses : 0;
        r.counters.bypasses = capacity > 0 ? 0 : misses;
        r.counters.evictions = r.counters.admissions - std::min(r.counters.admissions, capacity);
        r.bytes_read = result->accesses;
        r.bytes_hit = hits;
        r.seconds = lru_seconds;
        point.policies.push_back(r);
      } else {
        point.policies.push_back(pass[next_pass++]);
      }
    }
    result->points.push_back(std::move(point));
  }
  return Status::OK();
}

}  // namespace opt4store
