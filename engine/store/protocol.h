// The reader -> owner protocol: how readers (DataLoader workers, other local
// ranks) get the owner to write a value or fetch one from disk.
//
// Channel. One SharedQueue (tiers/shared_queue.h) in shared memory, many
// writers (the readers), one consumer (the owner's planner thread). A
// message is a tag and a body; its bytes are copied into the queue, so the
// sender's buffers are free once TryPush returns.
//
// Messages.
//   kMsgPut    PutHeader, then meta_size bytes of meta, then payload_size
//              bytes of payload: a value the reader loaded from its source
//              after a miss. The owner puts it into RAM if the residency
//              wants it at `position`, and writes it through to the disk
//              tier (which may leave it out, see store.h). No reply.
//   kMsgFetch  FetchMessage: the reader found `id` marked as on disk in the
//              control block but could not read it from its segment file
//              itself (ControlBlock::Place: no place published, or one out
//              of date after a compaction, or a record that failed its
//              CRC), and asks for it. The owner publishes the record's
//              place again, so the next read of it is the reader's own. The owner reads the record,
//              checks its CRC, copies it into the RAM tier (held there until
//              the readers pass `position`) or answers absent (RamTier::
//              AnswerAbsent), which bumps the item's version either way.
//
// Who waits on what. A reader that sent a fetch waits on the item's version
// in the RAM tier (a futex, RamTier::Wait) for at most fetch_timeout_ms,
// then reads RAM again; a version change without the item is a miss, and
// the reader loads from its source. A reader that misses an item the policy
// admitted at an earlier position (ControlBlock::Expectation) waits the
// same way, up to 2 s, for the Put of the reader loading it, instead of
// loading it a second time. The process that read the admitting position is
// recorded beside it (ControlBlock::ConsumedBy), and the wait looks it up
// every 20 ms: once that process is gone, the reader looks again after the
// owner has taken every Put sent so far (the dead reader may have sent it),
// then loads the item itself. After three waits in vain (timeouts) a
// process stops waiting for others' Puts. The owner never waits for a
// reader.
//
// Failures.
//   Queue full: a Put is dropped and counted (puts_dropped; the value is
//   loaded again when next needed); a fetch that cannot be sent is a miss.
//   A reader dies: its messages already in the queue are served; a message
//   half written is never seen (the tail moves only when it is complete);
//   a death while holding the queue's robust mutex is repaired by the next
//   locker. Nobody waits for a dead reader: a reader waiting for its Put
//   sees it gone within 20 ms (above).
//   The owner closes or dies: Close sets owner_closed in the control block
//   once it has taken the last queued Puts (before the disk tier's sync and
//   close, which can take seconds), after which readers send no fetch and
//   never wait (a Put still goes into the queue, where nobody reads it); an
//   owner killed without Close is seen by its readers' waits, which look its
//   process up (pid and start time, at most every 20 ms:
//   Store::Impl::OwnerGone) and then act as after a Close. Their values stay
//   right (they load from the source).
#ifndef OPT4STORE_ENGINE_STORE_PROTOCOL_H_
#define OPT4STORE_ENGINE_STORE_PROTOCOL_H_

#include <cstdint>

namespace opt4store {

constexpr uint32_t kMsgPut = 1;
constexpr uint32_t kMsgFetch = 2;

struct PutHeader {
  uint64_t position;
  uint32_t id;
  uint32_t meta_size;
  uint64_t payload_size;
};

struct FetchMessage {
  uint64_t position;
  uint32_t id;
  uint32_t reserved;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_PROTOCOL_H_
