// SharedQueue: a multi-producer, single-consumer message queue in shared
// memory, with a bounded byte capacity.
//
// The store uses it in two directions of one kind: DataLoader workers send
// the owner "put" messages carrying a value they loaded from the user's
// dataset (variable size, up to a few MiB), and "fetch" requests for items
// they want from the disk tier (then wait with RamTier::Wait on the item).
// Each message carries a 32-bit tag (the message kind) and a byte payload.
//
// A ring of bytes holds records [64-byte header | payload | padding to 64].
// A producer reserves a record under a robust, process-shared mutex (a few
// dozen instructions: move the tail, write the record header), releases the
// mutex, copies its payload outside it, then sets the record's commit flag.
// So several producers copy at once, and the consumer pops records in
// reservation order once each is committed.
//
// Failure model.
//   - A full ring: TryPush returns Busy at once and never waits for space
//     (a cache may drop a put). A message over max_message_bytes() is
//     InvalidArgument.
//   - /dev/shm: the ring's pages are reserved (posix_fallocate) from its
//     start, one step at a time, by the producer whose record first needs
//     them, under the mutex; the tail's first lap reserves about the whole
//     ring.
//     A store whose workers put nothing (a restart that finds every item
//     cached) reserves only the first step. A step that /dev/shm cannot
//     supply is NoSpace for that push; no page is ever written unreserved
//     (a tmpfs-full write would SIGBUS).
//   - A producer killed while holding the mutex: the next locker gets
//     EOWNERDEAD and marks the mutex consistent; the only shared change made
//     under the mutex is one store of the tail, so the ring is consistent
//     whether or not that store happened.
//   - A producer killed after reserving, before committing: the consumer
//     finds the uncommitted record at the head, sees that its producer
//     (pid + start time) is dead, and skips it.
//   - A producer that is alive but stopped (SIGSTOP) in the middle of a push
//     holds up the messages behind its record until it resumes.
//
// Thread safety: producer methods may be called from any number of threads
// in any number of processes. Consumer methods (Front, Pop, TryPop,
// WaitForMessage) belong to one thread of the process that called Create().
// Process safety: as above; the creating process unlinks the name when its
// SharedQueue is destroyed; a forked child that inherited it is a producer.
#ifndef OPT4STORE_TIERS_SHARED_QUEUE_H_
#define OPT4STORE_TIERS_SHARED_QUEUE_H_

#include <pthread.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/base/thread_annotations.h"
#include "opt4store/status.h"
#include "tiers/shared_memory.h"

namespace opt4store {

struct SharedQueueOptions {
  // Ring bytes (rounded up to 4 KiB). A message may use up to half of it,
  // less its 64-byte header, so that an empty ring always accepts one.
  uint64_t capacity_bytes = 64ull << 20;
  // The segment is "/<name_prefix>.<owner pid>.<n>" in /dev/shm.
  std::string name_prefix = "opt4store-queue";
  // As RamTierOptions::reserve_memory.
  bool reserve_memory = true;
  // With reserve_memory: ring bytes reserved at creation, and the least a
  // later step adds. Creation still checks that /dev/shm can hold them all.
  uint64_t reserve_step_bytes = 4ull << 20;
  // Tests inject a small /dev/shm here; statvfs when empty.
  std::function<Status(const std::string& dir, uint64_t* free_bytes)> free_space_for_testing;
};

// A message as the consumer sees it. `data` points into the ring and stays
// valid until Pop().
struct QueueMessage {
  uint32_t tag = 0;
  const char* data = nullptr;
  uint64_t size = 0;
};

struct SharedQueueStats {
  uint64_t pushes = 0;        // committed messages
  uint64_t bytes_pushed = 0;  // their payload bytes
  uint64_t full_rejects = 0;  // TryPush calls that found the ring full
  uint64_t pops = 0;
  uint64_t dead_skipped = 0;     // records of producers that died mid-push
  uint64_t lock_recoveries = 0;  // EOWNERDEAD: a lock holder died
  uint64_t used_bytes = 0;       // ring bytes between head and tail now
  uint64_t capacity_bytes = 0;
  uint64_t reserved_bytes = 0;    // ring bytes reserved in /dev/shm, from its start
  uint64_t reserve_failures = 0;  // pushes refused: /dev/shm had no room for a step
};

// The queue; see the top of this file for the protocol and failure model.
// Thread safety: producer methods from any thread; consumer methods from one
// thread of the creating process. Process safety: producers in any number
// of processes; a producer that dies at any point wedges nothing.
class SharedQueue {
 public:
  // Creates the ring; this process becomes its consumer. NoSpace (naming
  // the sizes) when /dev/shm cannot hold it.
  static Status Create(const SharedQueueOptions& options, std::unique_ptr<SharedQueue>* out);
  // Maps an existing queue by name() as a producer.
  static Status Attach(const std::string& name, std::unique_ptr<SharedQueue>* out);

  ~SharedQueue();
  SharedQueue(const SharedQueue&) = delete;
  SharedQueue& operator=(const SharedQueue&) = delete;

  const std::string& name() const;
  uint64_t capacity_bytes() const { return capacity_; }
  uint64_t max_message_bytes() const { return max_message_; }
  // True in the process that created the queue (false in forked children).
  bool IsConsumer() const;

  // ---- producers (any thread, any process)

  // Appends one message. Returns OK, Busy when the ring has no room now,
  // NoSpace when /dev/shm has none for the ring's next reserved step,
  // InvalidArgument when size > max_message_bytes(), IOError when the ring
  // is full and its consumer process is gone, or the mutex is unusable.
  // Never waits for space.
  Status TryPush(uint32_t tag, const void* data, uint64_t size);
  // The same, gathering the payload from several pieces (a header and a
  // value, without concatenating them first). *end (when not null): the
  // ring position just past the message; once PoppedThrough() reaches it,
  // the consumer is done with the message.
  Status TryPushv(uint32_t tag, const struct iovec* parts, int num_parts,
                  uint64_t* end = nullptr);
  // Any process: the consumer's head, in bytes since creation. Every
  // message whose end is at or below it has been popped (or skipped, its
  // producer dead). The store pops a message only after acting on it.
  uint64_t PoppedThrough() const;
  // Any process: the tail, in bytes since creation. Every message pushed
  // (or being pushed) before the call ends at or below it.
  uint64_t PushedThrough() const;

  // ---- the consumer

  // The oldest message. Returns OK, NotFound when the ring is empty, Busy
  // when the oldest record is still being written by a live producer.
  // Records of dead producers are skipped here.
  // REQUIRES: the consumer thread.
  Status Front(QueueMessage* message);
  // Drops the message Front() returned.
  // REQUIRES: the consumer thread; Front() returned OK since the last Pop().
  void Pop();
  // Front + copy + Pop.
  Status TryPop(uint32_t* tag, std::string* data);
  // Blocks until Front() would return OK (OK), or timeout_ms passes (Busy;
  // timeout_ms < 0 waits without limit). A futex on a commit counter: no
  // polling while the ring is idle.
  // REQUIRES: the consumer thread.
  Status WaitForMessage(int64_t timeout_ms);

  SharedQueueStats Stats() const;

  // Test hook: called during a push at each stage below; a test kills the
  // producer there. nullptr turns it off. Not for production use.
  enum class PushStage {
    kHoldingLock,  // the mutex is held, the tail not yet moved
    kReserved,     // the record is reserved, nothing of the payload written
    kHalfWritten,  // half of the payload written, not committed
  };
  using PushHook = void (*)(void* arg, PushStage stage);
  void SetPushHookForTesting(PushHook hook, void* arg) {
    push_hook_arg_ = arg;
    push_hook_ = hook;
  }
  // Test hook: called by Front when the head record is still reserved, just
  // before it asks whether the record's producer is alive (a test lets the
  // producer commit and exit there). nullptr turns it off.
  using StuckHook = void (*)(void* arg);
  void SetStuckHookForTesting(StuckHook hook, void* arg) {
    stuck_hook_arg_ = arg;
    stuck_hook_ = hook;
  }

 private:
  struct Header;
  struct RecordHeader;

  // The robust, process-shared mutex in the segment's header, typed as a
  // capability so that the analysis checks every Lock has its Unlock.
  // Nothing is GUARDED_BY it: the tail it orders is read without it (I1).
  struct CAPABILITY("mutex") RobustMutex {
    pthread_mutex_t native;
  };

  explicit SharedQueue(std::unique_ptr<SharedSegment> segment);
  Status InitLayout();
  // Takes the mutex; false, with *error set, when it cannot.
  bool Lock(Status* error) TRY_ACQUIRE(true, mutex_);
  // Exempt: the analysis cannot see pthread_mutex_unlock release mutex_.
  void Unlock() RELEASE(mutex_) NO_THREAD_SAFETY_ANALYSIS;
  RecordHeader* RecordAt(uint64_t position) const;
  // Reserves the ring's bytes [0, end) in /dev/shm, a step or more past
  // what is reserved. REQUIRES: the mutex (the reserved mark is its).
  Status ReserveThrough(uint64_t end) REQUIRES(mutex_);
  void Hook(PushStage stage) {
    if (push_hook_ != nullptr) push_hook_(push_hook_arg_, stage);
  }

  std::unique_ptr<SharedSegment> segment_;
  Header* header_ = nullptr;
  RobustMutex* mutex_ = nullptr;  // &header_->mutex
  char* ring_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t max_message_ = 0;

  // Consumer-private.
  uint64_t front_bytes_ = 0;  // record size of the message Front() returned
  uint64_t stuck_position_ = ~0ull;
  int64_t stuck_checked_ns_ = 0;

  PushHook push_hook_ = nullptr;
  void* push_hook_arg_ = nullptr;
  StuckHook stuck_hook_ = nullptr;
  void* stuck_hook_arg_ = nullptr;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_SHARED_QUEUE_H_
