#include "opt4store/next_use.h"

#include <algorithm>
#include <string>

namespace opt4store {

namespace {
constexpr size_t kSourceChunk = 1 << 16;
// How many appends ahead the per-id table is prefetched. Its loads are
// random, and without prefetch each one stalls the stream on DRAM.
constexpr size_t kPrefetchDistance = 32;
}

NextUseStream::~NextUseStream() = default;

Status NextUseStream::Open(std::unique_ptr<PlanSource> source, uint64_t window,
                           std::unique_ptr<NextUseStream>* stream) {
  const PlanShape& shape = source->shape();
  const bool open = source->known_end() < shape.total_reads || source->first_position() > 0;
  if (window == 0) {
    window = std::min<uint64_t>(shape.total_reads, kDefaultWindow);
    if (open && shape.epoch_length <= window / kOpenPlanWindowEpochs) {
      window = kOpenPlanWindowEpochs * shape.epoch_length;
    }
  }
  window = std::max<uint64_t>(1, std::min(window, shape.total_reads));
  if (window > UINT32_MAX) {
    return Status::InvalidArgument("look-ahead window of " + std::to_string(window) +
                                   " positions exceeds the maximum of 2^32-1");
  }
  std::unique_ptr<NextUseStream> s(new NextUseStream());
  s->source_ = std::move(source);
  s->window_ = window;
  s->ids_.resize(window);
  s->gap_.resize(window);
  s->last_.assign(shape.dataset_size, kNever);
  s->next_pos_ = s->filled_end_ = s->source_->first_position();
  if (window >= shape.total_reads && !open) {
    OPT4STORE_RETURN_IF_ERROR(s->FillWholePlan());
  } else {
    Reveal unused;
    const uint64_t end = std::min(s->next_pos_ + window, s->source_->known_end());
    while (s->filled_end_ < end) {
      if (!s->Append(&unused)) return s->status_;
    }
  }
  *stream = std::move(s);
  return Status::OK();
}

Status NextUseStream::FillWholePlan() {
  // The window holds the whole plan: read it all, then one backward pass
  // gives every gap, writing the ring in order instead of patching each
  // previous read at random as Append() must.
  const uint64_t total = shape().total_reads;
  while (filled_end_ < total) {
    size_t n = 0;
    OPT4STORE_RETURN_IF_ERROR(
        source_->Read(ids_.data() + filled_end_, static_cast<size_t>(total - filled_end_), &n));
    if (n == 0) {
      return Status::Corruption("plan ended at position " + std::to_string(filled_end_) +
                                " of " + std::to_string(total));
    }
    for (size_t i = 0; i < n; ++i) {
      if (ids_[filled_end_ + i] >= last_.size()) {
        return Status::OutOfRange("plan position " + std::to_string(filled_end_ + i) + ": id " +
                                  std::to_string(ids_[filled_end_ + i]) +
                                  " is not below the dataset size " +
                                  std::to_string(last_.size()));
      }
    }
    filled_end_ += n;
  }
  for (uint64_t p = total; p-- > 0;) {
    const ItemId id = ids_[p];
    const uint64_t next = last_[id];
    if (next == kNever) ++distinct_ids_;
    gap_[p] = next == kNever ? 0 : static_cast<uint32_t>(next - p);
    last_[id] = p;
  }
  return Status::OK();
}

bool NextUseStream::Next(Access* access, Reveal* reveal) {
  reveal->valid = false;
  if (!status_.ok() || next_pos_ == filled_end_) return false;
  const uint64_t slot = head_slot_;
  access->pos = next_pos_;
  access->id = ids_[slot];
  const uint32_t gap = gap_[slot];
  if (gap != 0) {
    access->next = next_pos_ + gap;
  } else {
    // Not read again inside the window: never if the window reaches the
    // plan's end, else somewhere beyond it.
    access->next = filled_end_ == shape().total_reads ? kNever : kFar;
  }
  ++next_pos_;
  if (++head_slot_ == window_) head_slot_ = 0;
  if (filled_end_ < source_->known_end()) Append(reveal);
  return true;
}

size_t NextUseStream::NextBatch(Access* accesses, size_t max, std::vector<StepReveal>* reveals) {
  const uint64_t total = shape().total_reads;
  const uint64_t known = source_->known_end();
  size_t n = 0;
  while (n < max && status_.ok() && next_pos_ < filled_end_) {
    const uint64_t slot = head_slot_;
    Access& a = accesses[n];
    a.pos = next_pos_;
    a.id = ids_[slot];
    const uint32_t gap = gap_[slot];
    a.next = gap != 0 ? next_pos_ + gap : (filled_end_ == total ? kNever : kFar);
    ++next_pos_;
    if (++head_slot_ == window_) head_slot_ = 0;
    if (filled_end_ < known) {
      Reveal reveal;
      Append(&reveal);
      if (reveal.valid) reveals->push_back({n, reveal.id, reveal.next});
    }
    ++n;
  }
  return n;
}

Status NextUseStream::Extend(std::vector<ItemId> ids, std::vector<Reveal>* reveals) {
  OPT4STORE_RETURN_IF_ERROR(status_);
  OPT4STORE_RETURN_IF_ERROR(source_->Append(std::move(ids)));
  const uint64_t end = std::min(next_pos_ + window_, source_->known_end());
  while (filled_end_ < end) {
    Reveal reveal;
    if (!Append(&reveal)) return status_;
    if (reveal.valid) reveals->push_back(reveal);
  }
  return Status::OK();
}

bool NextUseStream::Append(Reveal* reveal) {
  if (chunk_pos_ == chunk_.size()) {
    chunk_.resize(kSourceChunk);
    size_t n = 0;
    status_ = source_->Read(chunk_.data(), chunk_.size(), &n);
    if (status_.ok() && n == 0) {
      status_ = Status::Corruption("plan ended at position " + std::to_string(filled_end_) +
                                   " of " + std::to_string(shape().total_reads));
    }
    if (!status_.ok()) {
      chunk_.clear();
      chunk_pos_ = 0;
      return false;
    }
    chunk_.resize(n);
    chunk_pos_ = 0;
  }
  // Two prefetch stages: the per-id table far ahead, then, once that line
  // has arrived, the ring slot of the id's previous read (only a hint: an
  // id read again in between makes it stale, never wrong).
  if (chunk_pos_ + kPrefetchDistance < chunk_.size()) {
    const ItemId ahead = chunk_[chunk_pos_ + kPrefetchDistance];
    if (ahead < last_.size()) __builtin_prefetch(&last_[ahead], 1);
    const ItemId near = chunk_[chunk_pos_ + kPrefetchDistance / 2];
    if (near < last_.size()) {
      const uint64_t prev = last_[near];
      if (prev != kNever && prev >= next_pos_) __builtin_prefetch(&gap_[Slot(prev)], 1);
    }
  }
  const ItemId id = chunk_[chunk_pos_++];
  if (id >= last_.size()) {
    status_ = Status::OutOfRange("plan position " + std::to_string(filled_end_) + ": id " +
                                 std::to_string(id) + " is not below the dataset size " +
                                 std::to_string(last_.size()));
    return false;
  }
  const uint64_t p = filled_end_;
  const uint64_t slot = Slot(p);
  ids_[slot] = id;
  gap_[slot] = 0;
  const uint64_t prev = last_[id];
  if (prev == kNever) {
    ++distinct_ids_;
  } else {
    if (prev >= next_pos_) {
      gap_[Slot(prev)] = static_cast<uint32_t>(p - prev);
    } else {
      // prev was consumed with next == kFar: its next read is now known.
      reveal->valid = true;
      reveal->id = id;
      reveal->next = p;
    }
  }
  last_[id] = p;
  ++filled_end_;
  return true;
}

}  // namespace opt4store
