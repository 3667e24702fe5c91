// Residency: see residency.h for the invariants.
#include "engine/store/residency.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "opt4store/ram_units.h"
#include "tiers/disk_index.h"

namespace opt4store {
namespace {

// A byte capacity's stand-in size before any item's size is known.
constexpr uint64_t kMeanSizeBeforeAny = 64 * 1024;

}  // namespace

Residency::Residency(const ResidencyOptions& options, ResidencyTiers* tiers)
    : options_(options),
      tiers_(tiers),
      slots_(options.ring_slots),
      first_pending_(options.num_ids, 0),
      last_pending_(options.num_ids, 0),
      prefetch_pins_(options.num_ids, 0),
      sizes_(options.num_ids, 0) {}

// ---------------------------------------------------------------- sizes

uint64_t Residency::WholeUnits(uint64_t bytes) const {
  return std::min<uint64_t>(InRamUnits(std::min<uint64_t>(bytes, UINT32_MAX),
                                       std::max<uint64_t>(options_.size_unit, 1)),
                            UINT32_MAX);
}

void Residency::NoteSize(ItemId id, uint64_t bytes) {
  const uint32_t s = static_cast<uint32_t>(WholeUnits(bytes));
  if (sizes_[id] == 0) {
    size_sum_ += s;
    ++size_count_;
  }
  sizes_[id] = s;
}

uint64_t Residency::CostOf(ItemId id) const {
  if (options_.ram_items) return 1;
  return StagedBytesOf(id);
}

uint64_t Residency::StagedBytesOf(ItemId id) const {
  if (sizes_[id] != 0) return sizes_[id];
  return size_count_ ? std::max<uint64_t>(1, size_sum_ / size_count_) : kMeanSizeBeforeAny;
}

// ---------------------------------------------------------------- the plan

Status Residency::SetPlan(const PlanSpec& spec, uint64_t start,
                          const std::vector<ItemId>& in_ram) {
  std::unique_ptr<PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(OpenPlanSource(spec, &source).WithContext("plan"));
  if (source->shape().dataset_size > options_.num_ids) {
    return Status::InvalidArgument("the plan reads ids up to " +
                                   std::to_string(source->shape().dataset_size - 1) +
                                   ", beyond the store's " + std::to_string(options_.num_ids) +
                                   " items");
  }
  std::unique_ptr<NextUseStream> stream;
  OPT4STORE_RETURN_IF_ERROR(NextUseStream::Open(std::move(source), options_.plan_window, &stream));
  const uint64_t total = stream->shape().total_reads;
  start = std::min(start, total);
  if (start < stream->position()) {
    return Status::InvalidArgument("the plan starts at position " +
                                   std::to_string(stream->position()) + " (its first epoch given), "
                                   "after the start position " + std::to_string(start));
  }
  // Skip to the start: the policy begins there (KeepInRam).
  std::vector<Access> skip(4096);
  std::vector<StepReveal> reveals;
  while (stream->position() < start) {
    reveals.clear();
    size_t n = stream->NextBatch(skip.data(),
                                 std::min<uint64_t>(skip.size(), start - stream->position()),
                                 &reveals);
    if (n == 0) break;
  }
  OPT4STORE_RETURN_IF_ERROR(stream->status());

  PolicyOptions po;
  po.kind = options_.policy;
  po.capacity = options_.ram_items ? options_.ram_items : options_.ram;
  po.num_ids = options_.num_ids;
  po.window = stream->window();
  po.seed = spec.seed;
  po.track_ids = true;
  std::unique_ptr<Policy> policy;
  OPT4STORE_RETURN_IF_ERROR(NewPolicy(po, &policy));

  // Tell the disk tier when each id is read next, for its eviction order.
  if (options_.disk) {
    std::vector<uint8_t> seen(options_.num_ids, 0);
    for (uint64_t p = stream->position(); p < stream->lookahead_end(); ++p) {
      ItemId id = stream->PeekId(p);
      if (!seen[id]) {
        seen[id] = 1;
        tiers_->SetNextUse(id, p);
      }
    }
    if (stream->covers_whole_plan()) {
      for (uint64_t id = 0; id < options_.num_ids; ++id) {
        if (!seen[id]) tiers_->SetNextUse(static_cast<ItemId>(id), DiskIndex::kNeverRead);
      }
    }
  }

  plan_ = spec;
  if (spec.total_epochs) plan_.ids.reset();  // an open plan's epochs go once read
  stream_ = std::move(stream);
  policy_ = std::move(policy);
  total_ = total;
  frontier_ = planned_ = prefetch_cursor_ = start;
  std::fill(first_pending_.begin(), first_pending_.end(), 0);
  std::fill(last_pending_.begin(), last_pending_.end(), 0);
  std::fill(prefetch_pins_.begin(), prefetch_pins_.end(), 0);
  staged_bytes_ = 0;
  fetched_.clear();
  KeepInRam(in_ram);
  return Status::OK();
}

void Residency::KeepInRam(const std::vector<ItemId>& in_ram) {
  if (in_ram.empty()) return;
  // Each id's first read from the start; the ids the window does not read
  // are read beyond it (kFar) or, when the window holds the whole plan,
  // never. A kFar id stays ranked so until its read (the stream reveals
  // only ids it has seen), which costs OPT exactness only among kFar ids.
  const uint64_t unseen = stream_->covers_whole_plan() ? kNever : kFar;
  std::unordered_map<ItemId, uint64_t> next;
  next.reserve(in_ram.size());
  for (ItemId id : in_ram) next.emplace(id, unseen);
  size_t found = 0;
  for (uint64_t p = frontier_; p < stream_->lookahead_end() && found < next.size(); ++p) {
    auto it = next.find(stream_->PeekId(p));
    if (it != next.end() && it->second == unseen) {
      it->second = p;
      ++found;
    }
  }
  std::vector<std::pair<uint64_t, ItemId>> by_next;
  by_next.reserve(next.size());
  for (const auto& [id, at] : next) by_next.emplace_back(at, id);
  std::sort(by_next.begin(), by_next.end());
  for (const auto& [at, id] : by_next) {
    evicted_.clear();
    policy_->OnMiss(Access{frontier_, id, at}, CostOf(id), &evicted_);
  }
  for (ItemId id : in_ram) {
    if (!policy_->Contains(id) && tiers_->InRam(id)) tiers_->Evict(id);
  }
}

Status Residency::AppendPlan(std::vector<ItemId> ids) {
  if (!has_plan()) return Status::InvalidArgument("AppendPlan: there is no plan to append to");
  std::vector<Reveal> reveals;
  OPT4STORE_RETURN_IF_ERROR(stream_->Extend(std::move(ids), &reveals).WithContext("plan"));
  for (const Reveal& reveal : reveals) {
    policy_->OnReveal(reveal);
    NoteReveal(reveal.id, reveal.next);
  }
  return Status::OK();
}

uint64_t Residency::epoch_length() const {
  return stream_ ? stream_->shape().epoch_length : 0;
}

// ---------------------------------------------------------------- stepping

void Residency::PlanAhead(uint64_t limit, uint64_t force_through, uint64_t high_water) {
  if (!has_plan()) return;
  limit = std::min({limit, total_, frontier_ + options_.ring_slots});
  const bool bytes = options_.ram_items == 0;
  Access a;
  Reveal reveal;
  limit = std::min(limit, stream_->lookahead_end());  // an open plan knows no more yet
  while (planned_ < limit) {
    if (bytes && planned_ >= force_through && sizes_[stream_->PeekId(planned_)] == 0 &&
        planned_ + options_.prefetch_depth >= high_water) {
      break;  // wait for the Put that brings this item's size
    }
    if (!stream_->Next(&a, &reveal)) break;
    evicted_.clear();
    const bool hit = policy_->Step(a, CostOf(a.id), &evicted_);
    const uint32_t index = static_cast<uint32_t>(a.pos & (options_.ring_slots - 1));
    Slot& slot = slots_[index];
    slot.id = a.id;
    slot.next = 0;
    slot.flags = 0;
    slot.after = a.next == kNever ? DiskIndex::kNeverRead
                 : a.next == kFar ? a.pos + stream_->window()
                                  : a.next;
    if (last_pending_[a.id] != 0) {
      slots_[last_pending_[a.id] - 1].next = index + 1;
    } else {
      first_pending_[a.id] = index + 1;
    }
    last_pending_[a.id] = index + 1;
    if (hit) {
      slot.flags |= kHit;
      ++policy_hits_;
    } else if (!tiers_->InRam(a.id) && !(options_.disk && tiers_->OnDisk(a.id)) &&
               (policy_->Contains(a.id) || options_.disk)) {
      // Its reader loads it and Puts it: to RAM when admitted here, else to
      // the disk tier only. Later readers may wait for that Put (a reader
      // of the next epoch may come before the owner has taken or written it).
      // Not for an item on disk: its reader reads it there and Puts nothing,
      // and the expectation would outlive the read (readers of a later
      // position would wait for nothing once the tier let it go). If the
      // tier lets it go before that read, ExpectNextLoad expects it then.
      tiers_->ExpectPut(a.id, a.pos);
    }
    // A read coming into the window after this step, as the simulator's
    // StepBatch has it: the step would undo a reveal of its own id (its
    // next read is the one revealed), and a power-of-two window's ring
    // would take the revealed key, now + window, for now.
    if (reveal.valid) {
      policy_->OnReveal(reveal);
      NoteReveal(reveal.id, reveal.next);
    }
    RankOnDisk(a.id, 0);
    for (ItemId v : evicted_) MaybeEvict(v);
    planned_ = a.pos + 1;
  }
}

void Residency::Release(uint64_t position) {
  Slot& slot = SlotAt(position);
  if (!(slot.flags & kReleased)) ReleaseRead(&slot);
  slot.flags = 0;
}

void Residency::ReleaseRead(Slot* slot) {
  first_pending_[slot->id] = slot->next;
  if (slot->next == 0) last_pending_[slot->id] = 0;
  RankOnDisk(slot->id, slot->after);
  if (slot->flags & kPrefetchPin) {
    --prefetch_pins_[slot->id];
    staged_bytes_ -= std::min<uint64_t>(staged_bytes_, StagedBytesOf(slot->id));
  }
  slot->flags &= static_cast<uint8_t>(~kPrefetchPin);
  MaybeEvict(slot->id);
}

uint64_t Residency::PendingPosition(uint32_t slot_ref) const {
  return frontier_ + ((slot_ref - 1 - frontier_) & (options_.ring_slots - 1));
}

void Residency::NoteReveal(ItemId id, uint64_t next) {
  if (!options_.disk) return;
  if (last_pending_[id] != 0) slots_[last_pending_[id] - 1].after = next;
  RankOnDisk(id, next);
}

bool Residency::EpochLeft(uint64_t position, uint64_t high_water, int64_t now_ms) {
  const uint64_t length = epoch_length();
  if (length == 0 || high_water == 0) return false;
  const uint64_t epoch = position / length;
  if ((high_water - 1) / length <= epoch) return false;
  if (left_epoch_ != epoch + 1) {
    left_epoch_ = epoch + 1;
    left_at_ms_ = now_ms;
  }
  return now_ms - left_at_ms_ >= options_.epoch_grace_ms;
}

void Residency::AdvanceFrontier(uint64_t high_water, int64_t now_ms, uint64_t epoch_start) {
  if (!has_plan()) return;
  const uint64_t abandon_lag = options_.ring_slots / 2;
  // Readers far ahead of the planner: plan up to them so they can be passed.
  if (high_water > planned_ + options_.prefetch_depth) {
    const uint64_t target = std::min(high_water, frontier_ + abandon_lag);
    PlanAhead(target, target, high_water);
  }
  while (frontier_ < planned_) {
    ItemId got = 0;
    if (tiers_->Consumed(frontier_, &got)) {
      const ItemId planned_id = SlotAt(frontier_).id;
      if (got == kSkippedRead) {
        ++abandoned_;
        tiers_->Skipped(frontier_, planned_id);
      } else if (got != planned_id) {
        ++drift_;
        tiers_->Drifted(frontier_, planned_id, got);
      }
    } else if (frontier_ < epoch_start || high_water > frontier_ + abandon_lag ||
               EpochLeft(frontier_, high_water, now_ms)) {
      ++abandoned_;
      tiers_->Skipped(frontier_, SlotAt(frontier_).id);
      got = kSkippedRead;
    } else {
      break;
    }
    const ItemId planned_id = SlotAt(frontier_).id;
    Release(frontier_);
    ++frontier_;
    // A read that did not load its item leaves that load to its next read.
    if (got != planned_id) ExpectNextLoad(planned_id);
  }
  if (prefetch_cursor_ < frontier_) prefetch_cursor_ = frontier_;
  ReleaseConsumed();
}

// Readers (workers with prefetch_factor batches each) run ahead of the
// frontier, which waits for the slowest. Were their reads released only as
// the frontier passes, RAM would hold what the policy held at the frontier
// plus every item the reads ahead of it admitted, past ram=, and turn away
// prefetches and the fetches that carry disk items to the workers. So a
// read consumed as planned that is its id's first pending read is released
// at once, and a fetched item goes once its read is consumed.
void Residency::ReleaseConsumed() {
  ItemId got = 0;
  for (uint64_t p = frontier_; p < planned_; ++p) {
    Slot& slot = SlotAt(p);
    if ((slot.flags & kReleased) || !tiers_->Consumed(p, &got) || got != slot.id) continue;
    const uint32_t index = static_cast<uint32_t>(p & (options_.ring_slots - 1));
    if (first_pending_[slot.id] != index + 1) continue;  // an earlier read of it is pending
    ReleaseRead(&slot);
    slot.flags |= kReleased;
  }
  size_t kept = 0;
  for (size_t i = 0; i < fetched_.size(); ++i) {
    const Fetched f = fetched_[i];
    if (f.until >= frontier_ && !(InPlan(f.position) && tiers_->Consumed(f.position, &got))) {
      fetched_[kept++] = f;
      continue;
    }
    --prefetch_pins_[f.id];
    staged_bytes_ -= std::min<uint64_t>(staged_bytes_, StagedBytesOf(f.id));
    MaybeEvict(f.id);
  }
  fetched_.resize(kept);
}

// ---------------------------------------------------------------- decisions

bool Residency::HeldAfter(ItemId id, uint32_t next_slot) const {
  if (next_slot != 0) return (slots_[next_slot - 1].flags & kHit) != 0;
  return policy_->Contains(id);
}

bool Residency::Keep(ItemId id) const {
  if (!has_plan()) return true;  // no plan: fill once, never evict
  return prefetch_pins_[id] != 0 || HeldAfter(id, first_pending_[id]);
}

void Residency::MaybeEvict(ItemId id) {
  if (!Keep(id) && tiers_->InRam(id)) {
    tiers_->Evict(id);
    ExpectNextLoad(id);
  }
}

void Residency::ExpectNextLoad(ItemId id) {
  if (!has_plan() || tiers_->InRam(id) || (options_.disk && tiers_->OnDisk(id))) return;
  ItemId got = 0;
  for (uint32_t next = first_pending_[id]; next != 0; next = slots_[next - 1].next) {
    const uint64_t position = PendingPosition(next);
    // A read already begun may have Put it: an expectation of its Put could
    // outlive the Put, and keep readers waiting for nothing.
    if (tiers_->Consumed(position, &got)) continue;
    tiers_->ExpectPut(id, position);
    return;
  }
}

void Residency::RankOnDisk(ItemId id, uint64_t none_pending) {
  if (!has_plan() || !options_.disk) return;
  ItemId got = 0;
  uint32_t last = 0;
  for (uint32_t next = first_pending_[id]; next != 0; next = slots_[next - 1].next) {
    const Slot& slot = slots_[next - 1];
    const uint64_t position = PendingPosition(next);
    // A policy hit is read from RAM; a read consumed is done with.
    if (!(slot.flags & kHit) && !tiers_->Consumed(position, &got)) {
      tiers_->SetNextUse(id, position);
      return;
    }
    last = next;
  }
  if (last != 0) {
    tiers_->SetNextUse(id, slots_[last - 1].after);
  } else if (none_pending != 0) {
    tiers_->SetNextUse(id, none_pending);
  }
}

std::vector<ItemId> Residency::RankForRestart() {
  std::vector<ItemId> offered;
  if (!has_plan() || !options_.disk) return offered;
  std::vector<uint8_t> seen(options_.num_ids, 0);
  ItemId got = 0;
  for (uint64_t p = frontier_; p < planned_; ++p) {
    const ItemId id = SlotAt(p).id;
    if (seen[id] || tiers_->Consumed(p, &got)) continue;
    seen[id] = 1;
    tiers_->SetNextUse(id, p);
    if (tiers_->InRam(id) && !tiers_->OnDisk(id)) offered.push_back(id);
  }
  for (ItemId id = 0; id < options_.num_ids; ++id) {
    if (!seen[id] && tiers_->InRam(id) && !tiers_->OnDisk(id)) offered.push_back(id);
  }
  return offered;
}

bool Residency::Wanted(uint64_t position, ItemId id, uint64_t bytes) const {
  if (!has_plan()) {
    // Fill once: keep while it fits the capacity.
    uint64_t items = 0, stored = 0;
    tiers_->RamUsage(&items, &stored);
    if (options_.ram_items) return items < options_.ram_items;
    return stored + WholeUnits(bytes) <= options_.ram;
  }
  if (!InPlan(position) || position >= planned_) return policy_->Contains(id);
  // Held from this read on iff its next pending read is a hit (see
  // residency.h); this read's own slot links to that one.
  if (position >= frontier_) {
    const Slot& slot = SlotAt(position);
    if (slot.id == id) return HeldAfter(id, slot.next);
  }
  return HeldAfter(id, first_pending_[id]);
}

void Residency::CollectPrefetch(std::vector<ItemId>* ids) {
  ids->clear();
  if (!options_.disk || !has_plan()) return;
  const size_t max_batch = 32;
  while (prefetch_cursor_ < planned_ && ids->size() < max_batch) {
    if (staged_bytes_ >= options_.staging) break;
    Slot& slot = SlotAt(prefetch_cursor_);
    const ItemId id = slot.id;
    const uint64_t position = prefetch_cursor_++;
    if (slot.flags & kReleased) continue;  // read already
    const bool resident = tiers_->InRam(id);
    if (!resident && tiers_->BeingRead(position)) continue;  // its reader is ahead
    if (slot.flags & kHit) {
      // The policy's own copy should be there; if it was lost, bring it back.
      if (resident || !tiers_->OnDisk(id)) continue;
    } else if (!resident && !tiers_->OnDisk(id)) {
      continue;  // a first read: the reader loads it from the source
    }
    slot.flags |= kPrefetchPin;
    ++prefetch_pins_[id];
    staged_bytes_ += StagedBytesOf(id);
    if (!resident && std::find(ids->begin(), ids->end(), id) == ids->end()) ids->push_back(id);
  }
}

bool Residency::EvictUnneeded(uint64_t bytes) {
  if (!has_plan() || planned_ < total_) return false;
  uint64_t freed = 0;
  for (uint64_t step = 0; step < options_.num_ids && freed < bytes; ++step) {
    const ItemId id = unneeded_cursor_;
    unneeded_cursor_ = static_cast<ItemId>((unneeded_cursor_ + 1) % options_.num_ids);
    if (first_pending_[id] != 0 || prefetch_pins_[id] != 0 || !tiers_->InRam(id) ||
        !tiers_->OnDisk(id)) {
      continue;
    }
    tiers_->Evict(id);
    freed += StagedBytesOf(id);  // bytes, with either kind of capacity
  }
  return freed > 0;
}

void Residency::HoldFetched(ItemId id, uint64_t position) {
  const uint64_t until = InPlan(position) ? std::max(position, frontier_)
                                          : frontier_ + options_.prefetch_depth;
  ++prefetch_pins_[id];
  staged_bytes_ += StagedBytesOf(id);
  fetched_.push_back({InPlan(position) ? position : ~uint64_t{0}, until, id});
}

}  // namespace opt4store
