// NextUseStream: walks a plan and tells, for each read, when the same id is
// read next. This is the clairvoyance that OPT eviction, spilling and
// prefetch all run on.
//
// The stream keeps a look-ahead window of `window` upcoming positions in a
// ring. When position t is consumed, the window holds [t, t + window):
//   - if id(t) is read again inside the window, next is that exact position;
//   - if the plan ends inside the window and id(t) is not read again, next is
//     kNever;
//   - otherwise next is kFar: "at or after t + window", not yet known.
// A kFar is resolved later: when the window slides over the id's next read,
// the step that brings it in also returns a Reveal{id, position}. Each step
// brings in exactly one position, so it reveals at most one id.
//
// Memory: 8 bytes per window slot plus 8 bytes per dataset id, whatever the
// plan's length. With window >= the plan's length (or for shuffled epochs,
// window >= 2 epochs) no kFar is ever returned and OPT is exact.
//
// An open plan (PlanSpec::total_epochs: the source knows only its first
// epochs) starts at the source's first_position() and fills the window
// only up to what the source knows; Extend() appends epochs and fills on.
// There, kFar means "not read again before the end of what is known (or of
// the window)": an id whose next read lies in an epoch not yet appended is
// ranked as far until that epoch comes, and the reveal follows then. With
// every epoch a permutation, the epoch after the current one known and a
// window of two epochs, no id's next read is unknown, so OPT is exact as
// with the whole plan. The default window (8 Mi positions) spans two epochs
// of up to 4 Mi reads; past that, next reads in the next epoch can be
// ranked far (simulate counts such decisions as ambiguous).
//
// Thread safety: not thread-safe; one owner.
#ifndef OPT4STORE_NEXT_USE_H_
#define OPT4STORE_NEXT_USE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "opt4store/huge_page_allocator.h"
#include "opt4store/plan.h"
#include "opt4store/status.h"

namespace opt4store {

// Positions are 0-based and run across epochs: epoch e, index i is position
// e * epoch_length + i.
constexpr uint64_t kNever = UINT64_MAX;    // not read again in this plan
constexpr uint64_t kFar = UINT64_MAX - 1;  // read again, beyond the window

struct Access {
  uint64_t pos = 0;
  ItemId id = 0;
  uint64_t next = kNever;  // exact position, kFar or kNever
};

struct Reveal {
  bool valid = false;
  ItemId id = 0;
  uint64_t next = 0;  // the exact position of id's next read
};

// A reveal made by the step that consumed accesses[step] of a batch.
struct StepReveal {
  size_t step = 0;
  ItemId id = 0;
  uint64_t next = 0;
};

// Default look-ahead: 8 Mi positions (64 MiB), or the whole plan if shorter.
constexpr uint64_t kDefaultWindow = uint64_t{1} << 23;
// An open plan's default look-ahead in epochs: PlannedSampler keeps two
// epochs past the one it hands out, so about three are known past the
// planner; a permutation epoch's next reads lie within two. A longer window
// would cost memory (8 bytes a slot here, and the policy's ring) for nothing.
constexpr uint64_t kOpenPlanWindowEpochs = 3;

class NextUseStream {
 public:
  ~NextUseStream();
  NextUseStream(const NextUseStream&) = delete;
  NextUseStream& operator=(const NextUseStream&) = delete;

  // window == 0 means min(total reads, kDefaultWindow), and for an open
  // plan at most kOpenPlanWindowEpochs epochs. The window is clamped to the
  // plan's total reads. Fills the first window here (what the source knows
  // of it).
  static Status Open(std::unique_ptr<PlanSource> source, uint64_t window,
                     std::unique_ptr<NextUseStream>* stream);

  const PlanShape& shape() const { return source_->shape(); }
  uint64_t window() const { return window_; }
  // True when the window spans the whole plan and the source knows all of
  // it, so no kFar can occur.
  bool covers_whole_plan() const {
    return window_ >= shape().total_reads && source_->first_position() == 0 &&
           source_->known_end() == shape().total_reads;
  }

  // Appends the next whole epochs of an open plan (PlanSource::Append) and
  // fills the window with them. Ids consumed earlier as kFar whose next read
  // is now known are appended to *reveals. On error nothing is appended.
  Status Extend(std::vector<ItemId> ids, std::vector<Reveal>* reveals);

  // The next position to consume (== number consumed so far).
  uint64_t position() const { return next_pos_; }

  // Consumes one position. Returns false at the end of the plan, or on a
  // source error (then status() is not OK). *reveal is always written.
  bool Next(Access* access, Reveal* reveal);

  // Consumes up to `max` positions into accesses[0, return value), the same
  // as that many Next() calls; a reveal made by step i is appended to
  // *reveals as {i, id, next}, in order. Returns 0 at the end of the plan or
  // on a source error (see status()). The tight loop is how the simulator
  // reads: no call and no Reveal per read.
  size_t NextBatch(Access* accesses, size_t max, std::vector<StepReveal>* reveals);

  // The id at position p. REQUIRES: position() <= p < lookahead_end().
  ItemId PeekId(uint64_t p) const { return ids_[Slot(p)]; }
  // One past the last position in the window.
  uint64_t lookahead_end() const { return filled_end_; }

  // Distinct ids among the positions brought into the window so far; at the
  // end of the plan, the plan's distinct ids.
  uint64_t distinct_ids() const { return distinct_ids_; }

  const Status& status() const { return status_; }

 private:
  NextUseStream() = default;
  uint64_t Slot(uint64_t p) const {
    uint64_t s = head_slot_ + (p - next_pos_);
    return s >= window_ ? s - window_ : s;
  }
  // Appends the next id from the source at position filled_end_.
  bool Append(Reveal* reveal);
  // Fills a window that spans the whole plan in one backward pass.
  Status FillWholePlan();

  std::unique_ptr<PlanSource> source_;
  uint64_t window_ = 0;
  uint64_t next_pos_ = 0;    // first unconsumed position
  uint64_t head_slot_ = 0;   // ring slot of next_pos_
  uint64_t filled_end_ = 0;  // one past the last position in the ring
  HugeVector<ItemId> ids_;     // ring: the id at each window position
  HugeVector<uint32_t> gap_;   // ring: next read - this read, 0 = unknown
  HugeVector<uint64_t> last_;  // per id: last position appended, or kNever
  std::vector<ItemId> chunk_;  // ids read from the source, not yet appended
  size_t chunk_pos_ = 0;
  uint64_t distinct_ids_ = 0;
  Status status_;
};

}  // namespace opt4store

#endif  // OPT4STORE_NEXT_USE_H_
