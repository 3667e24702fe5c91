// Env: the file layer under the disk tier. Every byte the disk tier writes to
// or reads from a segment file, every directory listing, rename, unlink and
// the store's LOCK go through an Env, so that a FaultInjectionEnv
// (fault_injection_env.h) can make any of them fail, short or stall.
// RocksDB keeps its own files and its own Env.
//
// Three pieces:
//   File       one open file: positional writes and reads, sync, truncate,
//              size. Aligned reads use O_DIRECT when the file was opened
//              with direct_reads and the file system accepts it.
//   ReadQueue  batched reads: io_uring with a fixed depth, or plain pread
//              when a ring cannot be set up. Requests may name different
//              files of the same Env.
//   Env        opens files and queues, and does the directory operations.
//
// Env::Default() is the POSIX implementation. When O_DIRECT is refused (e.g.
// on tmpfs) or io_uring_queue_init fails (old kernel, seccomp), it falls back
// to buffered reads or to pread and says why once on stderr.
//
// Thread safety: an Env and a File are safe for concurrent use by several
// threads (writes to one File must not overlap each other). A ReadQueue
// belongs to one thread at a time.
#ifndef OPT4STORE_TIERS_ENV_H_
#define OPT4STORE_TIERS_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "opt4store/status.h"

namespace opt4store {

// O_DIRECT needs the file offset, the length and the buffer aligned to the
// device's logical block size. 4 KiB covers every device seen here.
constexpr size_t kDirectIoAlignment = 4096;

inline bool IsDirectIoAligned(uint64_t offset, size_t length, const void* buffer) {
  return offset % kDirectIoAlignment == 0 && length % kDirectIoAlignment == 0 &&
         reinterpret_cast<uintptr_t>(buffer) % kDirectIoAlignment == 0;
}

struct FileOptions {
  // Also open an O_DIRECT descriptor, used for reads whose offset, length
  // and buffer are all kDirectIoAlignment-aligned. Writes stay buffered.
  bool direct_reads = false;
};

// An open file. Writes are positional (pwrite); the disk tier uses them
// append-only and tracks the end itself.
class File {
 public:
  virtual ~File() = default;

  virtual const std::string& path() const = 0;

  // Writes the parts back to back at offset. On an error a prefix of the
  // bytes may have reached the file: the caller truncates it away.
  // Returns: OK, NoSpace (ENOSPC, EDQUOT), IOError.
  virtual Status Write(uint64_t offset, const std::string_view* parts, size_t count) = 0;

  // Reads up to n bytes at offset into scratch. The POSIX File returns
  // *result < n only at the end of the file; a FaultInjectionEnv may also
  // return a short read, like a kernel may: callers that need all n bytes
  // use ReadFully(). Aligned requests use O_DIRECT when available.
  // Returns: OK, IOError.
  virtual Status Read(uint64_t offset, size_t n, char* scratch, size_t* result) = 0;

  // fdatasync. Returns: OK, IOError.
  virtual Status Sync() = 0;
  // Returns: OK, IOError.
  virtual Status Truncate(uint64_t size) = 0;
  // Returns: OK, IOError.
  virtual Status Size(uint64_t* size) = 0;

  // True while aligned reads go through O_DIRECT.
  virtual bool direct_reads() const = 0;
};

// Calls file->Read until n bytes are read or a read returns 0 bytes (the end
// of the file). *result < n means the file ended first.
// Returns: OK, IOError.
Status ReadFully(File* file, uint64_t offset, size_t n, char* scratch, size_t* result);

// One read in a ReadQueue. The caller owns the request and its scratch
// buffer until WaitOne() hands the request back.
struct ReadRequest {
  File* file = nullptr;  // a File of the Env that made the queue
  uint64_t offset = 0;
  size_t length = 0;
  char* scratch = nullptr;  // length bytes; 4 KiB aligned for O_DIRECT
  void* context = nullptr;  // the caller's, untouched
  // False: read through the page cache even when aligned. For bytes that
  // may not be written back yet: an O_DIRECT read of dirty pages first
  // waits for their writeback, which is far slower than a cache hit.
  bool allow_direct = true;

  // Filled on completion. result < length only at the end of the file, or
  // when an Env (a FaultInjectionEnv) returns a short read: callers that
  // need more bytes read the rest.
  size_t result = 0;
  Status status;
};

struct ReadQueueOptions {
  unsigned depth = 32;  // reads in flight at most
  // False forces the pread path (the fallback used when a ring cannot be
  // set up), for tests and comparisons.
  bool io_uring = true;
};

// Batched reads with a fixed queue depth:
//
//   while (more to read or q->in_flight() > 0) {
//     while (more to read && q->in_flight() < q->depth()) q->Submit(next);
//     ReadRequest* done = q->WaitOne();  // refill, then consume it
//   }
//
// The io_uring implementation follows liburing's io_uring-cp example: one
// SQE per request with user_data, io_uring_cqe_seen on every completion,
// -EAGAIN requeued, short reads continued until the length or end of file.
class ReadQueue {
 public:
  virtual ~ReadQueue() = default;

  virtual unsigned depth() const = 0;
  virtual size_t in_flight() const = 0;
  // True when reads go through io_uring (false: pread fallback).
  virtual bool uses_io_uring() const = 0;

  // Starts a read: io_uring hands it to the kernel at once, so that a
  // caller that refills before it processes a completion keeps the device
  // busy meanwhile. (The pread fallback reads at the next WaitOne().)
  // REQUIRES: in_flight() < depth(); req stays valid until returned.
  virtual void Submit(ReadRequest* req) = 0;

  // Blocks until one submitted request is complete (fully read, at end of
  // file, or failed: see req->status) and returns it. Returns nullptr when
  // nothing is in flight.
  virtual ReadRequest* WaitOne() = 0;
};

// Held while the store's LOCK is held; deleting it releases the lock.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never deleted.
  static Env* Default();

  // Opens path for reading and writing, creating it if missing.
  // Returns: OK, IOError, NotFound (the directory is missing).
  virtual Status OpenFile(const std::string& path, const FileOptions& options,
                          std::unique_ptr<File>* file) = 0;

  // A new batched-read queue. Never fails for lack of io_uring: that falls
  // back to pread (see ReadQueue::uses_io_uring()).
  // Returns: OK, InvalidArgument (depth 0).
  virtual Status NewReadQueue(const ReadQueueOptions& options,
                              std::unique_ptr<ReadQueue>* queue) = 0;

  // Returns: OK, IOError.
  virtual Status CreateDirIfMissing(const std::string& dir) = 0;
  // Names of the entries in dir, without "." and "..", unsorted.
  // Returns: OK, NotFound, IOError.
  virtual Status GetChildren(const std::string& dir, std::vector<std::string>* names) = 0;
  // Returns: OK, NotFound, IOError.
  virtual Status GetFileSize(const std::string& path, uint64_t* size) = 0;
  // Returns: OK, NotFound, IOError.
  virtual Status DeleteFile(const std::string& path) = 0;
  // Atomically replaces `to`. Returns: OK, NotFound, IOError.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // fsync on a directory: makes creations, renames and unlinks in it durable.
  // Returns: OK, IOError.
  virtual Status SyncDir(const std::string& dir) = 0;

  // Takes an exclusive flock(LOCK_EX | LOCK_NB) on path (created if missing)
  // and writes this process's pid into it. The lock belongs to this open:
  // a second LockFile on the same path fails even in the same process.
  // It dies with the process that took it: a forked child closes its copy
  // of the descriptor at the fork, exec closes it too. A lock that no live
  // process holds (its holder just died) is waited for, up to 2 s.
  // Returns: OK, Busy (names the file and the live holder's pid), IOError.
  virtual Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) = 0;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_ENV_H_
