// FaultInjectionEnv: an Env that passes everything to a base Env (the POSIX
// one by default) and makes chosen operations fail: EIO or ENOSPC on a
// write, a read, a sync or a truncate; short reads; a disk that fills up
// after N more bytes; a process that dies (SIGKILL) in the middle of a write
// or right after one, for crash tests at exact points; a hook that runs at
// an operation, which then proceeds (a test that must act while the store
// is at that point: in Close's sync, say). Rules pick
// operations by kind, by a substring of the file's path, by position (let
// `skip` matching operations pass, then fire `times` times) and, for
// writes, by bytes written.
//
// The batched reads of its ReadQueues are injected the same way as
// File::Read, so the io_uring path of the disk tier is tested too:
// an error completes the request without reading; a short read performs the
// read and reports fewer bytes, as a kernel may.
//
//   FaultInjectionEnv env;
//   env.Inject(Fault::NoSpaceAfter(1 << 20));   // the disk is full in 1 MiB
//   env.Inject(Fault::ReadError(EIO).OnFile(".seg").Skip(4).Times(1));
//
// Thread safety: like any Env, safe for concurrent use; Inject and Clear
// may be called while other threads do I/O through the Env.
#ifndef OPT4STORE_TIERS_FAULT_INJECTION_ENV_H_
#define OPT4STORE_TIERS_FAULT_INJECTION_ENV_H_

#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/env.h"
#include "engine/base/mutex.h"

namespace opt4store {

// One rule. Build with the named constructors and the chained modifiers.
struct Fault {
  enum class Op : uint8_t { kRead, kWrite, kSync, kTruncate };
  enum class Effect : uint8_t { kError, kShortRead, kCrash, kCall };

  Op op = Op::kRead;
  Effect effect = Effect::kError;
  int error = EIO;            // kError: the errno to report
  std::string path_contains;  // empty: every file
  uint64_t skip = 0;          // matching operations that pass before it fires
  uint64_t times = UINT64_MAX;  // how often it fires, then it is spent
  // Writes only: the rule waits until this many bytes were written to
  // matching files after it was added; the write that crosses the mark
  // writes the bytes below it and then fails (a disk that fills up).
  uint64_t after_bytes = 0;
  size_t short_bytes = 1;  // kShortRead: the read reports at most this many bytes
  bool whole_write = false;  // kCrash: finish the write, then die
  std::function<void()> call;  // kCall: runs on the operation's thread, no lock held

  static Fault ReadError(int err = EIO) { return Make(Op::kRead, Effect::kError, err); }
  static Fault ShortRead(size_t max_bytes) {
    Fault f = Make(Op::kRead, Effect::kShortRead, 0);
    f.short_bytes = max_bytes;
    return f;
  }
  static Fault WriteError(int err = EIO) { return Make(Op::kWrite, Effect::kError, err); }
  static Fault NoSpaceAfter(uint64_t bytes) {
    Fault f = Make(Op::kWrite, Effect::kError, ENOSPC);
    f.after_bytes = bytes;
    return f;
  }
  // The process is killed (SIGKILL) inside the write that crosses `bytes`,
  // once the bytes below the mark are written: a torn write.
  static Fault CrashAt(uint64_t bytes) {
    Fault f = Make(Op::kWrite, Effect::kCrash, 0);
    f.after_bytes = bytes;
    return f;
  }
  // The matching write completes, then the process is killed. With
  // Skip(k): right after the (k+1)-th write.
  static Fault CrashAfterWrite() {
    Fault f = Make(Op::kWrite, Effect::kCrash, 0);
    f.whole_write = true;
    return f;
  }
  static Fault SyncError(int err = EIO) { return Make(Op::kSync, Effect::kError, err); }
  // fn runs when a matching operation of kind `op` starts; the operation
  // then goes on as if no rule had fired.
  static Fault Call(Op op, std::function<void()> fn) {
    Fault f = Make(op, Effect::kCall, 0);
    f.call = std::move(fn);
    return f;
  }
  static Fault TruncateError(int err = EIO) { return Make(Op::kTruncate, Effect::kError, err); }

  Fault& OnFile(std::string substring) {
    path_contains = std::move(substring);
    return *this;
  }
  Fault& Skip(uint64_t n) {
    skip = n;
    return *this;
  }
  Fault& Times(uint64_t n) {
    times = n;
    return *this;
  }

 private:
  static Fault Make(Op op, Effect effect, int err) {
    Fault f;
    f.op = op;
    f.effect = effect;
    f.error = err;
    return f;
  }
};

class FaultInjectionEnv final : public Env {
 public:
  // base == nullptr: Env::Default(). base must outlive this Env.
  explicit FaultInjectionEnv(Env* base = nullptr);
  ~FaultInjectionEnv() override;

  // Adds a rule; returns its id for fired(). Rules are checked in the order
  // added and the first one that fires decides.
  int Inject(const Fault& fault);
  // Removes every rule (counters stay).
  void Clear();
  // How many times rule `id` has fired.
  uint64_t fired(int id) const;

  // Totals over every operation that went through this Env.
  uint64_t reads() const;
  uint64_t writes() const;
  uint64_t bytes_written() const;

  Status OpenFile(const std::string& path, const FileOptions& options,
                  std::unique_ptr<File>* file) override;
  Status NewReadQueue(const ReadQueueOptions& options,
                      std::unique_ptr<ReadQueue>* queue) override;
  Status CreateDirIfMissing(const std::string& dir) override {
    return base_->CreateDirIfMissing(dir);
  }
  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    return base_->GetChildren(dir, names);
  }
  Status GetFileSize(const std::string& path, uint64_t* size) override {
    return base_->GetFileSize(path, size);
  }
  Status DeleteFile(const std::string& path) override { return base_->DeleteFile(path); }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }
  Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) override {
    return base_->LockFile(path, lock);
  }

  // What a rule decided for one operation. Internal to the Env's files and
  // queues; public so that they need no friendship.
  struct Decision {
    bool fire = false;
    Fault::Effect effect = Fault::Effect::kError;
    int error = 0;
    uint64_t allowed_bytes = 0;  // writes: bytes to write before failing
    size_t short_bytes = 0;
  };
  // Counts the operation and consults the rules. n: bytes, for writes.
  Decision Check(Fault::Op op, const std::string& path, uint64_t n);

 private:
  // Check's part under mu_; *call: a kCall rule's hook, for Check to run.
  Decision Decide(Fault::Op op, const std::string& path, uint64_t n,
                  std::function<void()>* call);

  struct Rule {
    Fault fault;
    int id;
    uint64_t seen = 0;          // matching operations so far
    uint64_t bytes_seen = 0;    // writes: matching bytes so far
    uint64_t fired = 0;
  };

  Env* const base_;
  mutable Mutex mu_;
  std::vector<Rule> rules_ GUARDED_BY(mu_);
  std::vector<uint64_t> fired_ GUARDED_BY(mu_);  // by rule id
  uint64_t reads_ GUARDED_BY(mu_) = 0;
  uint64_t writes_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ GUARDED_BY(mu_) = 0;
};

}  // namespace opt4store

#endif  // OPT4STORE_TIERS_FAULT_INJECTION_ENV_H_
