// Shared-memory plumbing for the tiers: named POSIX shared-memory segments,
// process identity that survives pid reuse, and futex waits on a word that
// lives in shared memory.
//
// A SharedSegment is one object in /dev/shm (shm_open) named
//   /<prefix>.<pid>.<seq>
// after the process that created it. Forked children inherit the mapping;
// other processes (spawned DataLoader workers) map it again with Attach(name).
// The first 4 KiB of the object is a segment header (magic, creator pid,
// start time and pid namespace, size); data() points past it and is
// page-aligned.
//
// Creation checks the free space of /dev/shm first (statvfs) and fails with
// Status::NoSpace naming both sizes, then reserves every page with
// posix_fallocate, so that a tmpfs that fills up later cannot SIGBUS a process
// that touches the segment. It also removes objects with the same prefix whose
// creator is dead (or whose pid now belongs to a different process), which is
// what a kill -9 leaves behind. Only objects made in this process's pid
// namespace are judged: in a container that shares /dev/shm with others
// (docker --ipc=host) another namespace's pids cannot be looked up (and the
// same pid may be a live process there), and a live store's segments must
// stay.
//
// Thread safety: a SharedSegment is immutable after Create/Attach; its const
// methods may be called from any thread. The free functions are thread-safe.
// Process safety: the object outlives every mapping; the creating process
// (not a forked child that inherited the object) unlinks the name when it
// destroys its SharedSegment, and the other mappings stay valid until unmapped.
#ifndef OPT4STORE_TIERS_SHARED_MEMORY_H_
#define OPT4STORE_TIERS_SHARED_MEMORY_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "opt4store/status.h"

namespace opt4store {

// ---------------------------------------------------------------- processes

// The free functions live in opt4store::shm, away from the engine's names.
namespace shm {

// A process as seen by other processes: its pid and its start time in clock
// ticks since boot (/proc/<pid>/stat field 22), so that a recycled pid is
// not taken for the process that once had it.
struct ProcessIdentity {
  int32_t pid = 0;
  uint64_t start_ticks = 0;  // 0: unknown (no /proc)
};

// This process. Cached, and refreshed in a forked child.
ProcessIdentity CurrentProcess();

// This process's pid namespace: the inode of /proc/self/ns/pid, 0 when it
// cannot be read. Cached, and read again in a forked child (the child of a
// process that called unshare(CLONE_NEWPID) is in the new namespace).
uint64_t PidNamespace();

// True while `pid` runs and (when start_ticks != 0) started at start_ticks.
// A zombie counts as dead: it will never run again.
bool ProcessAlive(int32_t pid, uint64_t start_ticks);

// Packs a ProcessIdentity into one 64-bit word (pid in the low 22 bits, the
// start time above), so that a shared slot can be claimed with one CAS.
// 0 means "nobody". Linux pids are below 2^22 (PID_MAX_LIMIT).
uint64_t PackProcess(const ProcessIdentity& p);
ProcessIdentity UnpackProcess(uint64_t packed);

// Incremented in every child right after fork(). A handle caches the value
// it saw when it claimed a per-process resource; a mismatch means "I am a
// forked child; claim my own". One relaxed load, cheap on the hot path.
uint32_t ForkGeneration();

// ---------------------------------------------------------------- futex

// Waits while *word == expected, at most timeout_ns (< 0: no limit). The word
// may be in shared memory mapped at different addresses in each process.
// Returns 0 when woken, or errno: EAGAIN (the word differed), ETIMEDOUT, EINTR.
int FutexWait(const void* word, uint32_t expected, int64_t timeout_ns);
// Wakes up to `count` waiters on word (INT32_MAX: all).
void FutexWake(const void* word, int32_t count);

// ---------------------------------------------------------------- free space

// Free bytes of the filesystem holding `dir` (statvfs f_bavail * f_frsize,
// saturated at 2^64 - 1).
Status FreeSpace(const std::string& dir, uint64_t* free_bytes);

}  // namespace shm

// ---------------------------------------------------------------- segments

struct SharedSegmentOptions {
  // The object is named "/<prefix>.<pid>.<seq>". No '/' in the prefix.
  std::string prefix = "opt4store";
  // What the segment is for, and what the user can lower, for the NoSpace
  // message: "<what> needs 2.00 GiB in /dev/shm, which has 1.20 GiB free;
  // enlarge /dev/shm (docker --shm-size) or <remedy>".
  std::string what = "shared segment";
  std::string remedy = "use less shared memory";
  // Reserve every page at creation (posix_fallocate). Costs the memory up
  // front (it is used anyway) and turns a later tmpfs-full SIGBUS into a
  // NoSpace at creation. Only tests turn it off.
  bool reserve = true;
  // With reserve: how many bytes of the data, from its start, Create
  // reserves; the creator reserves the rest with Reserve() as it comes to
  // use them (the RAM tier's arena, as it fills).
  uint64_t reserve_data_bytes = UINT64_MAX;
  // Whether Create's free-space check covers the whole size (the RAM tier:
  // its size is the user's budget, which /dev/shm must hold) or only what
  // Create reserves (the shared queue: its capacity is a ceiling for
  // bursts, and a step that finds no room refuses that push alone).
  bool check_whole_size = true;
  // Remove objects with this prefix whose creator is gone.
  bool remove_stale = true;
  // Where glibc's shm_open keeps its objects.
  std::string shm_dir = "/dev/shm";
  // Free-space probe; FreeSpace() when empty. Tests inject a small /dev/shm.
  std::function<Status(const std::string& dir, uint64_t* free_bytes)> free_space;
};

// One named shared-memory object, mapped into this process.
// Thread safety: immutable after Create/Attach; any thread may use it.
// Process safety: any number of processes map the object; only the creating
// process (not its forked children) unlinks the name, on destruction.
class SharedSegment {
 public:
  // Bytes in front of data(): the segment header, one page.
  static constexpr uint64_t kHeaderBytes = 4096;
  // The largest data_bytes Create accepts (64 PiB): far above any /dev/shm,
  // low enough that the sizes around it cannot overflow 64 bits.
  static constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 56;

  // Creates, sizes, reserves and maps a new object with data_bytes of zeroed
  // user data. Returns NoSpace (naming the sizes) when /dev/shm is too small.
  static Status Create(const SharedSegmentOptions& options, uint64_t data_bytes,
                       std::unique_ptr<SharedSegment>* out);
  // Maps an existing object by name (as name() returns it, with its '/').
  // Returns NotFound when there is no such object, Corruption when it is not
  // a segment this code created.
  static Status Attach(const std::string& name, std::unique_ptr<SharedSegment>* out);
  // Attach for a process that only looks (`opt4store stats` on a store in
  // use): the object is opened O_RDONLY and mapped PROT_READ, so that the
  // looker cannot change it. Writing through data() faults.
  static Status AttachReadOnly(const std::string& name, std::unique_ptr<SharedSegment>* out);
  // Removes the objects in shm_dir named "<prefix>.<pid>.<seq>" whose header
  // names a creator of this pid namespace that is dead. *removed (may be
  // null) gets the number removed.
  static Status RemoveStale(const std::string& shm_dir, const std::string& prefix, int* removed);

  // Unmaps. The creating process also unlinks the name; a forked child that
  // inherited this object only unmaps.
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  // Reserves (posix_fallocate) data bytes [offset, offset + length), so
  // that writes there cannot SIGBUS. Any process that maps the object may:
  // it is opened by name. NoSpace when /dev/shm cannot supply them now.
  Status Reserve(uint64_t offset, uint64_t length) const;

  char* data() const { return data_; }
  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t mapped_bytes() const { return mapped_bytes_; }
  const std::string& name() const { return name_; }
  // The creator as recorded in the segment header.
  shm::ProcessIdentity creator() const;
  // The creator's pid namespace (shm::PidNamespace() there; 0 unknown): its
  // pid means something only to processes of the same namespace.
  uint64_t creator_pid_namespace() const;
  // True in the process that created the object (false in forked children).
  bool IsCreatorProcess() const;

 private:
  SharedSegment(std::string name, char* base, uint64_t mapped_bytes, bool created);
  static Status AttachMapped(const std::string& name, bool read_only,
                             std::unique_ptr<SharedSegment>* out);

  std::string name_;
  char* base_;
  char* data_;
  uint64_t mapped_bytes_;
  uint64_t data_bytes_;
  bool created_;
  int32_t creator_pid_;  // getpid() of the creating process, 0 when attached
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_SHARED_MEMORY_H_
