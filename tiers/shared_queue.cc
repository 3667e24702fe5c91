// Invariants.
//
// Segment layout (from SharedSegment::data()):
//   [0, 4 KiB)   Header: geometry; the robust mutex; tail, head and the
//                consumer's futex word on cache lines of their own; counters.
//   [4 KiB, ..)  the ring, capacity_ bytes.
//
// head and tail are byte counts since creation (they never wrap in practice:
// 2^64 bytes); a position p lives at ring_[p % capacity_]. Records start on
// 64-byte boundaries and never wrap: one that would cross the end is
// preceded by a padding record that fills the rest of the ring.
//
// I1. tail is written only under the mutex, and as the last shared change of
//     a reservation (one release store). Record headers at positions >= tail
//     are scratch that nobody reads. Hence the ring is consistent at every
//     instant a mutex holder can die, and EOWNERDEAD needs no repair.
// I2. Records in [head, tail) have complete headers (written before the
//     tail store that covered them). Their state only moves forward:
//     reserved -> committed (by their producer, release). Padding records are
//     born final.
// I3. head is written only by the consumer, after it is done with the
//     record(s) it passes (release). A producer reserves only space below
//     head + capacity_ (it loads head with acquire), so it never writes bytes
//     the consumer may still read.
// I4. A record's producer is identified by pid and start time. The consumer
//     skips a reserved record only if that process is dead (or a zombie)
//     and the record is still reserved after the death was seen; a dead
//     process writes nothing more, so skipped space can be reused.
// I5. The consumer sleeps on `commits` (futex) only after announcing itself
//     in consumer_waiting; a producer bumps commits before it checks
//     consumer_waiting (both seq_cst), so a wake-up cannot be lost.
// I6. No byte of the ring at or past `reserved` is written. Every push
//     keeps its record's end plus one record header within it (or reserved
//     is the whole ring), so the padding header a later push may write at
//     the tail is reserved too. `reserved` only grows, under the mutex, as
//     far as records reach (the tail's first lap: about the whole ring).
#include "tiers/shared_queue.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "opt4store/sizes.h"

namespace opt4store {

using shm::CurrentProcess;
using shm::FutexWait;
using shm::FutexWake;
using shm::PackProcess;
using shm::ProcessAlive;
using shm::ProcessIdentity;
using shm::UnpackProcess;

namespace {

constexpr uint64_t kQueueMagic = 0x31515545'55515F4FULL;  // "O_QUEUQ1"
constexpr uint32_t kQueueVersion = 2;
constexpr uint64_t kHeaderRegion = 4096;
constexpr uint64_t kRecordAlign = 64;
constexpr uint64_t kRecordHeaderBytes = 64;

constexpr uint32_t kReserved = 1;
constexpr uint32_t kCommitted = 2;
constexpr uint32_t kPadding = 3;

// How often the consumer re-checks the producer of a stuck head record.
constexpr int64_t kStuckCheckNs = 1000 * 1000;

inline uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

struct SharedQueue::Header {
  std::atomic<uint64_t> magic;  // stored last
  uint32_t version;
  uint32_t reserved0;
  uint64_t capacity;
  uint64_t max_message;
  int32_t consumer_pid;
  uint32_t reserved1;
  uint64_t consumer_start_ticks;
  uint64_t reserve_step;  // I6's least step (the whole ring: reserved at creation)
  // Guards tail and the record headers being reserved (robust, pshared).
  alignas(64) RobustMutex mutex;
  alignas(128) std::atomic<uint64_t> tail;
  alignas(128) std::atomic<uint64_t> head;
  alignas(128) std::atomic<uint32_t> commits;  // futex word of the consumer
  std::atomic<uint32_t> consumer_waiting;
  alignas(128) std::atomic<uint64_t> pushes;
  std::atomic<uint64_t> bytes_pushed;
  std::atomic<uint64_t> full_rejects;
  std::atomic<uint64_t> lock_recoveries;
  alignas(128) std::atomic<uint64_t> pops;
  std::atomic<uint64_t> dead_skipped;
  // Ring bytes reserved from its start (I6); written under the mutex.
  alignas(128) std::atomic<uint64_t> reserved;
  std::atomic<uint64_t> reserve_failures;
};

struct SharedQueue::RecordHeader {
  std::atomic<uint32_t> state;  // kReserved, kCommitted or kPadding
  uint32_t tag;
  uint64_t size;      // payload bytes; for padding, the bytes it covers
  uint64_t producer;  // PackProcess of the reserving process
  char unused[40];
};

SharedQueue::SharedQueue(std::unique_ptr<SharedSegment> segment) : segment_(std::move(segment)) {
  static_assert(sizeof(Header) <= kHeaderRegion, "queue header fits its page");
  static_assert(sizeof(RecordHeader) == kRecordHeaderBytes, "64-byte record header");
}

SharedQueue::~SharedQueue() = default;

Status SharedQueue::Create(const SharedQueueOptions& options, std::unique_ptr<SharedQueue>* out) {
  if (options.capacity_bytes < 4096) {
    return Status::InvalidArgument("SharedQueue: capacity_bytes must be at least 4096, got " +
                                   std::to_string(options.capacity_bytes));
  }
  const uint64_t capacity = RoundUp(options.capacity_bytes, 4096);
  const uint64_t first_step =
      options.reserve_memory
          ? std::min(capacity, RoundUp(std::max<uint64_t>(options.reserve_step_bytes, 1), 4096))
          : capacity;
  SharedSegmentOptions so;
  so.prefix = options.name_prefix;
  so.what = "shared queue";
  so.remedy = "lower the queue capacity";
  so.reserve = options.reserve_memory;
  so.reserve_data_bytes = kHeaderRegion + first_step;
  so.check_whole_size = false;  // Docker's 64 MiB /dev/shm holds a store
  so.free_space = options.free_space_for_testing;
  std::unique_ptr<SharedSegment> segment;
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::Create(so, kHeaderRegion + capacity, &segment));

  auto* h = new (segment->data()) Header();
  h->version = kQueueVersion;
  h->capacity = capacity;
  h->max_message = capacity / 2 - kRecordHeaderBytes;
  const ProcessIdentity me = CurrentProcess();
  h->consumer_pid = me.pid;
  h->consumer_start_ticks = me.start_ticks;
  h->reserve_step = first_step;
  h->reserved.store(first_step, std::memory_order_relaxed);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  int rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(&h->mutex.native, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return Status::FromErrno("SharedQueue: robust process-shared mutex", rc);
  h->magic.store(kQueueMagic, std::memory_order_release);

  std::unique_ptr<SharedQueue> q(new SharedQueue(std::move(segment)));
  OPT4STORE_RETURN_IF_ERROR(q->InitLayout());
  *out = std::move(q);
  return Status::OK();
}

Status SharedQueue::Attach(const std::string& name, std::unique_ptr<SharedQueue>* out) {
  std::unique_ptr<SharedSegment> segment;
  OPT4STORE_RETURN_IF_ERROR(SharedSegment::Attach(name, &segment));
  std::unique_ptr<SharedQueue> q(new SharedQueue(std::move(segment)));
  OPT4STORE_RETURN_IF_ERROR(q->InitLayout());
  *out = std::move(q);
  return Status::OK();
}

Status SharedQueue::InitLayout() {
  header_ = reinterpret_cast<Header*>(segment_->data());
  mutex_ = &header_->mutex;
  const Header& h = *header_;
  if (h.magic.load(std::memory_order_acquire) != kQueueMagic || h.version != kQueueVersion) {
    return Status::Corruption(segment_->name() + ": not an opt4store shared queue");
  }
  if (h.capacity % 4096 != 0 || h.capacity > segment_->data_bytes() - kHeaderRegion ||
      h.max_message != h.capacity / 2 - kRecordHeaderBytes || h.reserve_step == 0 ||
      h.reserve_step > h.capacity) {
    return Status::Corruption(segment_->name() + ": queue header does not fit its segment");
  }
  capacity_ = h.capacity;
  max_message_ = h.max_message;
  ring_ = segment_->data() + kHeaderRegion;
  return Status::OK();
}

const std::string& SharedQueue::name() const { return segment_->name(); }

bool SharedQueue::IsConsumer() const { return segment_->IsCreatorProcess(); }

SharedQueue::RecordHeader* SharedQueue::RecordAt(uint64_t position) const {
  return reinterpret_cast<RecordHeader*>(ring_ + position % capacity_);
}

bool SharedQueue::Lock(Status* error) {
  int rc = pthread_mutex_lock(&mutex_->native);
  if (rc == EOWNERDEAD) {
    // The holder died in its critical section. By I1 the ring is consistent
    // whether or not it moved the tail: declare the mutex usable again.
    rc = pthread_mutex_consistent(&mutex_->native);
    header_->lock_recoveries.fetch_add(1, std::memory_order_relaxed);
  }
  if (rc != 0) {
    *error = Status::FromErrno("SharedQueue: lock", rc);
    return false;
  }
  return true;
}

void SharedQueue::Unlock() { pthread_mutex_unlock(&mutex_->native); }

Status SharedQueue::ReserveThrough(uint64_t end) {
  Header& h = *header_;
  const uint64_t reserved = h.reserved.load(std::memory_order_relaxed);
  const uint64_t want =
      std::min(capacity_, std::max(RoundUp(end, 4096), reserved + h.reserve_step));
  // Any producer may reserve: the segment is opened by name, not through
  // the creator's descriptor.
  const Status s = segment_->Reserve(kHeaderRegion + reserved, want - reserved);
  if (!s.ok()) {
    h.reserve_failures.fetch_add(1, std::memory_order_relaxed);
    return Status::NoSpace("SharedQueue::TryPush: the queue holds " + FormatSize(reserved) +
                           " of its " + FormatSize(capacity_) + " and cannot grow: " +
                           s.ToString());
  }
  h.reserved.store(want, std::memory_order_relaxed);
  return Status::OK();
}

// ---------------------------------------------------------------- producers

Status SharedQueue::TryPush(uint32_t tag, const void* data, uint64_t size) {
  iovec part;
  part.iov_base = const_cast<void*>(data);
  part.iov_len = size;
  return TryPushv(tag, &part, 1);
}

Status SharedQueue::TryPushv(uint32_t tag, const struct iovec* parts, int num_parts,
                             uint64_t* end) {
  uint64_t size = 0;
  for (int i = 0; i < num_parts; ++i) size += parts[i].iov_len;
  if (size > max_message_) {
    return Status::InvalidArgument("SharedQueue::TryPush: message of " + FormatSize(size) +
                                   " exceeds the limit of " + FormatSize(max_message_) +
                                   " (half the queue capacity)");
  }
  const uint64_t record = RoundUp(kRecordHeaderBytes + size, kRecordAlign);
  const uint64_t me = PackProcess(CurrentProcess());
  Header& h = *header_;

  Status lock_error;
  if (!Lock(&lock_error)) return lock_error;
  const uint64_t tail = h.tail.load(std::memory_order_relaxed);
  const uint64_t head = h.head.load(std::memory_order_acquire);  // I3
  const uint64_t offset = tail % capacity_;
  const uint64_t to_end = capacity_ - offset;
  const uint64_t padding = record > to_end ? to_end : 0;
  if (tail + padding + record - head > capacity_) {
    Unlock();
    h.full_rejects.fetch_add(1, std::memory_order_relaxed);
    if (!ProcessAlive(h.consumer_pid, h.consumer_start_ticks)) {
      return Status::IOError("SharedQueue::TryPush: the queue is full and its consumer is gone");
    }
    return Status::Busy("SharedQueue::TryPush: queue full");
  }
  // I6: the record, and the padding header a later push may write after it.
  const uint64_t written_end = (padding > 0 ? 0 : offset) + record + kRecordHeaderBytes;
  const uint64_t reserved = h.reserved.load(std::memory_order_relaxed);
  if (reserved < capacity_ && reserved < written_end) {
    const Status grown = ReserveThrough(written_end);
    if (!grown.ok()) {
      Unlock();
      return grown;
    }
  }
  uint64_t position = tail;
  if (padding > 0) {
    RecordHeader* pad = RecordAt(position);
    pad->size = padding;
    pad->tag = 0;
    pad->producer = me;
    pad->state.store(kPadding, std::memory_order_relaxed);
    position += padding;
  }
  RecordHeader* r = RecordAt(position);
  r->tag = tag;
  r->size = size;
  r->producer = me;
  r->state.store(kReserved, std::memory_order_relaxed);
  Hook(PushStage::kHoldingLock);
  h.tail.store(position + record, std::memory_order_release);  // I1: the one visible change
  Unlock();
  if (end != nullptr) *end = position + record;

  Hook(PushStage::kReserved);
  char* dst = reinterpret_cast<char*>(r) + kRecordHeaderBytes;
  uint64_t written = 0;
  bool hooked_half = false;
  for (int i = 0; i < num_parts; ++i) {
    const char* src = static_cast<const char*>(parts[i].iov_base);
    uint64_t len = parts[i].iov_len;
    if (!hooked_half && push_hook_ != nullptr && written + len > size / 2) {
      const uint64_t first = size / 2 - written;  // stop exactly at half
      std::memcpy(dst + written, src, first);
      written += first;
      src += first;
      len -= first;
      Hook(PushStage::kHalfWritten);
      hooked_half = true;
    }
    if (len > 0) std::memcpy(dst + written, src, len);
    written += len;
  }
  r->state.store(kCommitted, std::memory_order_release);  // I2
  h.pushes.fetch_add(1, std::memory_order_relaxed);
  h.bytes_pushed.fetch_add(size, std::memory_order_relaxed);
  h.commits.fetch_add(1, std::memory_order_seq_cst);  // I5
  if (h.consumer_waiting.load(std::memory_order_seq_cst) != 0) FutexWake(&h.commits, 1);
  return Status::OK();
}

uint64_t SharedQueue::PushedThrough() const {
  return header_->tail.load(std::memory_order_acquire);  // I1
}

uint64_t SharedQueue::PoppedThrough() const {
  return header_->head.load(std::memory_order_acquire);  // I3
}

// ---------------------------------------------------------------- consumer

Status SharedQueue::Front(QueueMessage* message) {
  if (!IsConsumer()) {
    return Status::InvalidArgument("SharedQueue::Front: only the creating process consumes");
  }
  Header& h = *header_;
  for (;;) {
    const uint64_t head = h.head.load(std::memory_order_relaxed);
    const uint64_t tail = h.tail.load(std::memory_order_acquire);  // I2
    if (head == tail) return Status::NotFound("queue empty");
    RecordHeader* r = RecordAt(head);
    const uint32_t state = r->state.load(std::memory_order_acquire);
    if (state == kPadding) {
      h.head.store(head + r->size, std::memory_order_release);
      continue;
    }
    const uint64_t record = RoundUp(kRecordHeaderBytes + r->size, kRecordAlign);
    if (state == kCommitted) {
      message->tag = r->tag;
      message->data = reinterpret_cast<const char*>(r) + kRecordHeaderBytes;
      message->size = r->size;
      front_bytes_ = record;
      return Status::OK();
    }
    // Reserved: being written, or its producer died (I4).
    const int64_t now = NowNs();
    if (head != stuck_position_ || now - stuck_checked_ns_ >= kStuckCheckNs) {
      stuck_position_ = head;
      stuck_checked_ns_ = now;
      if (stuck_hook_ != nullptr) stuck_hook_(stuck_hook_arg_);
      const ProcessIdentity p = UnpackProcess(r->producer);
      if (!ProcessAlive(p.pid, p.start_ticks)) {
        // It may have committed after `state` was read, and then exited
        // (a worker at an epoch's end while this thread was descheduled).
        // A dead process writes nothing more: a record still reserved now
        // stays so.
        if (r->state.load(std::memory_order_acquire) != kReserved) continue;
        h.dead_skipped.fetch_add(1, std::memory_order_relaxed);
        h.head.store(head + record, std::memory_order_release);
        continue;
      }
    }
    return Status::Busy("queue head is still being written");
  }
}

void SharedQueue::Pop() {
  Header& h = *header_;
  h.head.store(h.head.load(std::memory_order_relaxed) + front_bytes_, std::memory_order_release);
  front_bytes_ = 0;
  h.pops.fetch_add(1, std::memory_order_relaxed);
}

Status SharedQueue::TryPop(uint32_t* tag, std::string* data) {
  QueueMessage m;
  OPT4STORE_RETURN_IF_ERROR(Front(&m));
  *tag = m.tag;
  data->assign(m.data, m.size);
  Pop();
  return Status::OK();
}

Status SharedQueue::WaitForMessage(int64_t timeout_ms) {
  Header& h = *header_;
  const int64_t deadline = NowNs() + (timeout_ms < 0 ? 0 : timeout_ms * 1000000);
  for (;;) {
    const uint32_t seen = h.commits.load(std::memory_order_seq_cst);
    QueueMessage m;
    Status s = Front(&m);
    if (s.ok()) return s;
    if (!s.IsNotFound() && !s.IsBusy()) return s;
    // A stuck head is re-checked for a dead producer every kStuckCheckNs.
    int64_t slice = s.IsBusy() ? kStuckCheckNs : -1;
    if (timeout_ms >= 0) {
      const int64_t left = deadline - NowNs();
      if (left <= 0) return Status::Busy("SharedQueue::WaitForMessage: timed out");
      slice = slice < 0 ? left : std::min(slice, left);
    }
    h.consumer_waiting.store(1, std::memory_order_seq_cst);  // I5
    FutexWait(&h.commits, seen, slice);
    h.consumer_waiting.store(0, std::memory_order_relaxed);
  }
}

SharedQueueStats SharedQueue::Stats() const {
  const Header& h = *header_;
  SharedQueueStats s;
  s.pushes = h.pushes.load(std::memory_order_relaxed);
  s.bytes_pushed = h.bytes_pushed.load(std::memory_order_relaxed);
  s.full_rejects = h.full_rejects.load(std::memory_order_relaxed);
  s.pops = h.pops.load(std::memory_order_relaxed);
  s.dead_skipped = h.dead_skipped.load(std::memory_order_relaxed);
  s.lock_recoveries = h.lock_recoveries.load(std::memory_order_relaxed);
  const uint64_t head = h.head.load(std::memory_order_acquire);  // first: tail >= head then
  s.used_bytes = h.tail.load(std::memory_order_acquire) - head;
  s.capacity_bytes = capacity_;
  s.reserved_bytes = h.reserved.load(std::memory_order_relaxed);
  s.reserve_failures = h.reserve_failures.load(std::memory_order_relaxed);
  return s;
}

}  // namespace opt4store
