// The POSIX Env: pread/pwritev files with an optional O_DIRECT descriptor,
// io_uring read queues with a pread fallback, and flock-based LOCK files.
#include "engine/base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace opt4store {

namespace {

// Each fallback is announced once per process, not once per file or queue.
std::atomic<bool> g_logged_direct_refused{false};
std::atomic<bool> g_logged_ring_failed{false};

void LogOnce(std::atomic<bool>* flag, const std::string& message) {
  if (!flag->exchange(true)) std::fprintf(stderr, "opt4store: %s\n", message.c_str());
}

// The largest single read handed to the kernel; io_uring_prep_read takes an
// unsigned length and pread may stop at 2 GiB anyway. Longer requests
// continue like a short read.
constexpr size_t kMaxReadChunk = size_t{1} << 30;

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, int direct_fd)
      : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd), direct_ok_(direct_fd >= 0) {}
  ~PosixFile() override {
    close(fd_);
    if (direct_fd_ >= 0) close(direct_fd_);
  }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  const std::string& path() const override { return path_; }

  Status Write(uint64_t offset, const std::string_view* parts, size_t count) override {
    std::vector<iovec> iov;
    iov.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (!parts[i].empty()) {
        iov.push_back({const_cast<char*>(parts[i].data()), parts[i].size()});
      }
    }
    size_t first = 0;
    while (first < iov.size()) {
      const int n = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
      const ssize_t w = pwritev(fd_, &iov[first], n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno("write " + path_, errno);
      }
      if (w == 0) return Status::IOError("write " + path_ + ": wrote 0 bytes");
      offset += static_cast<uint64_t>(w);
      // A short write: skip what was written and go on with the rest.
      size_t left = static_cast<size_t>(w);
      while (first < iov.size() && left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        ++first;
      }
      if (left > 0) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    return Status::OK();
  }

  Status Read(uint64_t offset, size_t n, char* scratch, size_t* result) override {
    return ReadAt(offset, n, scratch, result, /*allow_direct=*/true);
  }

  Status ReadAt(uint64_t offset, size_t n, char* scratch, size_t* result, bool allow_direct) {
    size_t done = 0;
    while (done < n) {
      const size_t want = std::min(n - done, kMaxReadChunk);
      const bool direct = allow_direct && UseDirect(offset + done, want, scratch + done);
      const ssize_t r = pread(direct ? direct_fd_ : fd_, scratch + done, want,
                              static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        if (errno == EINVAL && direct) {
          DisableDirect("EINVAL");
          continue;
        }
        *result = done;
        return Status::FromErrno("read " + path_, errno);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    *result = done;
    return Status::OK();
  }

  Status Sync() override {
    if (fdatasync(fd_) != 0) return Status::FromErrno("fdatasync " + path_, errno);
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return Status::FromErrno("truncate " + path_, errno);
    }
    return Status::OK();
  }

  Status Size(uint64_t* size) override {
    struct stat st;
    if (fstat(fd_, &st) != 0) return Status::FromErrno("stat " + path_, errno);
    *size = static_cast<uint64_t>(st.st_size);
    return Status::OK();
  }

  bool direct_reads() const override { return direct_ok_.load(std::memory_order_relaxed); }

  // The descriptor for a read; O_DIRECT only when everything is aligned.
  bool UseDirect(uint64_t offset, size_t length, const void* buffer) const {
    return direct_reads() && IsDirectIoAligned(offset, length, buffer);
  }
  int fd(bool direct) const { return direct ? direct_fd_ : fd_; }

  // Some file systems accept O_DIRECT at open and refuse the reads.
  void DisableDirect(const char* why) {
    direct_ok_.store(false, std::memory_order_relaxed);
    LogOnce(&g_logged_direct_refused, "O_DIRECT reads of " + path_ + " failed (" + why +
                                          "); reading through the page cache instead");
  }

 private:
  const std::string path_;
  const int fd_;
  const int direct_fd_;  // -1: none
  std::atomic<bool> direct_ok_;
};

// io_uring with a fixed depth, or pread when the ring is unavailable.
class PosixReadQueue final : public ReadQueue {
 public:
  PosixReadQueue(unsigned depth, bool try_ring) : depth_(depth), slots_(depth) {
    free_.reserve(depth);
    for (unsigned i = 0; i < depth; ++i) free_.push_back(depth - 1 - i);
    if (try_ring) {
      // A completion queue twice the depth cannot overflow: at most depth
      // reads are in flight.
      const int rc = io_uring_queue_init(depth, &ring_, 0);
      if (rc == 0) {
        ring_ok_ = true;
      } else {
        LogOnce(&g_logged_ring_failed, std::string("io_uring_queue_init failed (") +
                                           std::strerror(-rc) +
                                           "); batched reads fall back to pread");
      }
    }
  }

  ~PosixReadQueue() override {
    // Never leave a read in the kernel that targets a buffer about to be freed.
    while (in_flight_ > 0) WaitOne();
    if (ring_ok_) io_uring_queue_exit(&ring_);
  }

  unsigned depth() const override { return depth_; }
  size_t in_flight() const override { return in_flight_; }
  bool uses_io_uring() const override { return ring_ok_; }

  void Submit(ReadRequest* req) override {
    req->result = 0;
    req->status = Status::OK();
    ++in_flight_;
    if (!ring_ok_) {
      pending_.push_back(req);
      return;
    }
    const unsigned s = free_.back();
    free_.pop_back();
    slots_[s].req = req;
    slots_[s].done = 0;
    Prepare(&slots_[s]);
    SubmitPrepared();
  }

  ReadRequest* WaitOne() override {
    if (in_flight_ == 0) return nullptr;
    if (!ring_ok_) {
      ReadRequest* req = pending_.front();
      pending_.pop_front();
      --in_flight_;
      req->status = static_cast<PosixFile*>(req->file)->ReadAt(
          req->offset, req->length, req->scratch, &req->result, req->allow_direct);
      return req;
    }
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      int rc;
      if (unsubmitted_ > 0) {
        rc = io_uring_submit_and_wait(&ring_, 1);
        if (rc >= 0) {
          unsubmitted_ -= std::min<unsigned>(unsubmitted_, static_cast<unsigned>(rc));
          rc = io_uring_peek_cqe(&ring_, &cqe);
          if (rc == -EAGAIN) continue;  // submitted, nothing completed yet
        }
      } else {
        rc = io_uring_wait_cqe(&ring_, &cqe);
      }
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
      if (rc < 0) {
        // The ring itself is broken. Reads may still be in the kernel,
        // pointing at the callers' buffers: there is no safe way on.
        std::fprintf(stderr, "opt4store: io_uring wait failed: %s\n", std::strerror(-rc));
        std::abort();
      }
      Slot* slot = static_cast<Slot*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);

      ReadRequest* req = slot->req;
      auto* file = static_cast<PosixFile*>(req->file);
      if (res == -EAGAIN || res == -EINTR) {
        Prepare(slot);  // requeue as it was
        continue;
      }
      if (res == -EINVAL && slot->direct) {
        file->DisableDirect("EINVAL from io_uring");
        Prepare(slot);
        continue;
      }
      if (res > 0) {
        slot->done += static_cast<size_t>(res);
        if (slot->done < req->length) {
          // A short read is not the end of the file: ask for the rest. The
          // end of the file answers 0 and stops this.
          Prepare(slot);
          continue;
        }
      } else if (res < 0) {
        req->status = Status::FromErrno("read " + file->path(), -res);
      }
      req->result = slot->done;
      free_.push_back(static_cast<unsigned>(slot - slots_.data()));
      --in_flight_;
      return req;
    }
  }

 private:
  struct Slot {
    ReadRequest* req = nullptr;
    size_t done = 0;      // bytes already read
    bool direct = false;  // the current SQE uses the O_DIRECT descriptor
  };

  // Hands prepared SQEs to the kernel; what it does not take now goes with
  // the next io_uring_submit_and_wait in WaitOne().
  void SubmitPrepared() {
    const int rc = io_uring_submit(&ring_);
    if (rc > 0) unsubmitted_ -= std::min<unsigned>(unsubmitted_, static_cast<unsigned>(rc));
  }

  // Queues one SQE for the part of slot's request not yet read.
  void Prepare(Slot* slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {
      // The submission queue is full of prepared entries: hand them over.
      const int rc = io_uring_submit(&ring_);
      if (rc > 0) unsubmitted_ -= std::min<unsigned>(unsubmitted_, static_cast<unsigned>(rc));
      sqe = io_uring_get_sqe(&ring_);
    }
    ReadRequest* req = slot->req;
    auto* file = static_cast<PosixFile*>(req->file);
    const uint64_t offset = req->offset + slot->done;
    const size_t length = std::min(req->length - slot->done, kMaxReadChunk);
    char* buffer = req->scratch + slot->done;
    slot->direct = req->allow_direct && file->UseDirect(offset, length, buffer);
    io_uring_prep_read(sqe, file->fd(slot->direct), buffer, static_cast<unsigned>(length),
                       offset);
    io_uring_sqe_set_data(sqe, slot);
    ++unsubmitted_;
  }

  const unsigned depth_;
  bool ring_ok_ = false;
  io_uring ring_{};
  std::vector<Slot> slots_;
  std::vector<unsigned> free_;
  size_t in_flight_ = 0;
  unsigned unsubmitted_ = 0;
  std::deque<ReadRequest*> pending_;  // pread mode only
};

// The LOCK descriptors this process holds. flock belongs to the open file
// description, which fork() shares with the child: a DataLoader worker that
// outlived a killed owner would keep the store locked, and every later open
// would get Busy naming a dead pid. So a forked child closes its copies at
// once (pthread_atfork); the parent's lock is untouched, since the lock
// goes only when the last descriptor of the description does. O_CLOEXEC
// covers exec. The mutex keeps fork() out of the middle of a register.
class HeldLocks {
 public:
  static HeldLocks* Get() {
    static HeldLocks* held = [] {
      auto* h = new HeldLocks();
      pthread_atfork(&Prepare, &Parent, &Child);
      return h;
    }();
    return held;
  }
  void Add(int fd) {
    pthread_mutex_lock(&mu_);
    fds_.push_back(fd);
    pthread_mutex_unlock(&mu_);
  }
  void Remove(int fd) {
    pthread_mutex_lock(&mu_);
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
    pthread_mutex_unlock(&mu_);
  }

 private:
  static void Prepare() { pthread_mutex_lock(&Get()->mu_); }
  static void Parent() { pthread_mutex_unlock(&Get()->mu_); }
  // In the child: one thread, and only async-signal-safe calls (close).
  static void Child() {
    HeldLocks* h = Get();
    for (int fd : h->fds_) close(fd);
    h->fds_.clear();
    pthread_mutex_unlock(&h->mu_);
  }

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  std::vector<int> fds_;
};

class PosixFileLock final : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd), pid_(getpid()) { HeldLocks::Get()->Add(fd); }
  ~PosixFileLock() override {
    // In a forked child the descriptor was closed at the fork, and its
    // number may name another file by now.
    if (getpid() != pid_) return;
    HeldLocks::Get()->Remove(fd_);
    flock(fd_, LOCK_UN);
    close(fd_);
  }

 private:
  const int fd_;
  const pid_t pid_;
};

// A zombie (dead, not yet reaped) holds nothing: not alive here.
bool ProcessAlive(long pid) {
  if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)) return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;
  char line[512] = {0};
  const bool got = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  const char* paren = got ? std::strrchr(line, ')') : nullptr;  // the name may hold spaces
  return paren == nullptr || paren[1] == '\0' || paren[2] != 'Z';
}

// The processes with a descriptor open on the file (dev, ino), found in
// /proc/*/fd; those whose descriptors cannot be read (another user's) are
// missed. Only for the Busy message.
std::vector<long> ProcessesWithFileOpen(dev_t dev, ino_t ino) {
  std::vector<long> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* p = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(p->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string fd_dir = std::string("/proc/") + p->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* f = readdir(fds)) {
      struct stat st;
      if (f->d_name[0] == '.' || stat((fd_dir + "/" + f->d_name).c_str(), &st) != 0) continue;
      if (st.st_dev == dev && st.st_ino == ino) {
        out.push_back(pid);
        break;
      }
    }
    closedir(fds);
  }
  closedir(proc);
  return out;
}

// Who holds the LOCK at path, for the Busy message: live processes only.
// recorded: the pid the holder wrote into the file, named only while that
// process lives (a pid may be reused, so /proc must agree when it can).
// *live: false when no live holder was found.
std::string DescribeLockHolder(const std::string& path, long recorded, bool* live) {
  struct stat st;
  std::vector<long> holders;
  if (stat(path.c_str(), &st) == 0) holders = ProcessesWithFileOpen(st.st_dev, st.st_ino);
  const bool recorded_holds =
      recorded > 0 && (std::find(holders.begin(), holders.end(), recorded) != holders.end() ||
                       (holders.empty() && ProcessAlive(recorded)));
  *live = true;
  if (recorded_holds) {
    std::string who = "pid " + std::to_string(recorded);
    if (recorded == static_cast<long>(getpid())) who += " (this process: the store is already open)";
    return who;
  }
  std::string who;
  for (long pid : holders) who += (who.empty() ? "pid " : ", pid ") + std::to_string(pid);
  if (!who.empty()) return who;
  *live = recorded <= 0;  // no pid yet: a holder that is still starting
  return recorded > 0 ? "another process (the one that took it has exited)"
                      : "another process (pid not yet written)";
}

// How long LockFile waits for a lock whose holder has died: the kernel
// drops a killed process's lock a moment after its parent has reaped it.
constexpr int kDeadHolderWaitMs = 2000;
constexpr int kDeadHolderPollMs = 10;

class PosixEnv final : public Env {
 public:
  Status OpenFile(const std::string& path, const FileOptions& options,
                  std::unique_ptr<File>* file) override {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno("open " + path, errno);
    int direct_fd = -1;
    if (options.direct_reads) {
      direct_fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      if (direct_fd < 0) {
        LogOnce(&g_logged_direct_refused, "O_DIRECT refused for " + path + " (" +
                                              std::strerror(errno) +
                                              "); reading through the page cache instead");
      }
    }
    file->reset(new PosixFile(path, fd, direct_fd));
    return Status::OK();
  }

  Status NewReadQueue(const ReadQueueOptions& options,
                      std::unique_ptr<ReadQueue>* queue) override {
    if (options.depth == 0) return Status::InvalidArgument("read queue depth must be > 0");
    queue->reset(new PosixReadQueue(options.depth, options.io_uring));
    return Status::OK();
  }

  Status CreateDirIfMissing(const std::string& dir) override {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::FromErrno("mkdir " + dir, errno);
    }
    return Status::OK();
  }

  Status GetChildren(const std::string& dir, std::vector<std::string>* names) override {
    names->clear();
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return Status::FromErrno("opendir " + dir, errno);
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names->emplace_back(e->d_name);
    }
    closedir(d);
    return Status::OK();
  }

  Status GetFileSize(const std::string& path, uint64_t* size) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return Status::FromErrno("stat " + path, errno);
    *size = static_cast<uint64_t>(st.st_size);
    return Status::OK();
  }

  Status DeleteFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return Status::FromErrno("unlink " + path, errno);
    return Status::OK();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return Status::FromErrno("rename " + from + " to " + to, errno);
    }
    return Status::OK();
  }

  Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open " + dir, errno);
    const int rc = fsync(fd);
    const int err = errno;
    close(fd);
    if (rc != 0) return Status::FromErrno("fsync " + dir, err);
    return Status::OK();
  }

  Status LockFile(const std::string& path, std::unique_ptr<FileLock>* lock) override {
    int fd = -1;
    for (int waited_ms = 0;; waited_ms += kDeadHolderPollMs) {
      fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return Status::FromErrno("open " + path, errno);
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
      const int err = errno;
      if (err != EWOULDBLOCK) {
        close(fd);
        return Status::FromErrno("flock " + path, err);
      }
      char buf[32] = {0};
      const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
      close(fd);  // before the holders are looked up: not one of them
      const long pid = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
      bool live = true;
      const std::string who = DescribeLockHolder(path, pid, &live);
      if (live || waited_ms >= kDeadHolderWaitMs) {
        return Status::Busy("lock file " + path + " is held by " + who);
      }
      usleep(kDeadHolderPollMs * 1000);
    }
    // Ours now: record who holds it, for the next opener's message.
    const std::string pid = std::to_string(getpid()) + "\n";
    if (ftruncate(fd, 0) != 0 ||
        pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      const int err = errno;
      close(fd);
      return Status::FromErrno("write pid to " + path, err);
    }
    lock->reset(new PosixFileLock(fd));
    return Status::OK();
  }
};

}  // namespace

Status ReadFully(File* file, uint64_t offset, size_t n, char* scratch, size_t* result) {
  size_t done = 0;
  while (done < n) {
    size_t got = 0;
    Status s = file->Read(offset + done, n - done, scratch + done, &got);
    if (!s.ok()) {
      *result = done;
      return s;
    }
    if (got == 0) break;
    done += got;
  }
  *result = done;
  return Status::OK();
}

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

}  // namespace opt4store
