// Invariants:
//  - A segment's header magic is stored last (release), after the sizes and
//    the creator are written, so an attacher or a stale-object scan that sees
//    the magic sees a complete header.
//  - Only the creating process unlinks a name. A forked child has the same
//    SharedSegment object but a different getpid(), so its destructor only
//    unmaps.
//  - An object is removed as stale only when its header is written and
//    names a creator in this process's pid namespace (or one unknown: no
//    /proc, a header of version 1) that is dead, or whose pid runs but
//    started at a different time (pid reuse). A live creator's object is
//    never touched, nor one whose header is not written yet, nor one made
//    in another pid namespace (a container sharing /dev/shm, docker
//    --ipc=host), whose pids mean nothing here.
//  - The header is written before the rest of the object is reserved, so
//    the moment in which a killed creator leaves an object that no scan
//    removes is short (creating the object, reserving and writing its
//    first page).
#include "tiers/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/base/checked_math.h"
#include "opt4store/sizes.h"

namespace opt4store {

using shm::CurrentProcess;
using shm::FreeSpace;
using shm::ProcessAlive;
using shm::ProcessIdentity;

namespace {

constexpr uint64_t kSegmentMagic = 0x31474553'53345F4FULL;  // "O_4SSEG1"
constexpr uint32_t kSegmentVersion = 2;
constexpr uint64_t kPageBytes = 4096;
constexpr int kMaxNameAttempts = 1000;

struct SegmentHeader {
  std::atomic<uint64_t> magic;  // kSegmentMagic once the rest is written
  uint32_t version;
  uint32_t header_bytes;
  uint64_t mapped_bytes;
  uint64_t data_bytes;
  int32_t creator_pid;
  uint32_t reserved;
  uint64_t creator_start_ticks;
  uint64_t creator_pid_namespace;  // shm::PidNamespace() of the creator
};
static_assert(sizeof(SegmentHeader) <= SharedSegment::kHeaderBytes, "header fits its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "64-bit atomics in shared memory must be lock-free (address-free)");

// ---- process identity cache, reset in forked children.
std::atomic<int32_t> g_pid{0};
std::atomic<uint64_t> g_start_ticks{0};
std::atomic<uint64_t> g_pid_namespace{0};
std::atomic<bool> g_pid_namespace_known{false};
std::atomic<uint32_t> g_fork_generation{0};
std::atomic<uint64_t> g_name_seq{0};

void OnForkChild() {
  g_pid.store(0, std::memory_order_relaxed);
  // A child of a process that called unshare(CLONE_NEWPID) is in the new namespace.
  g_pid_namespace_known.store(false, std::memory_order_relaxed);
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
}

const int g_atfork_registered = pthread_atfork(nullptr, nullptr, &OnForkChild);

// Reads the state letter and the start time (field 22) of /proc/<pid>/stat.
// The command name (field 2) may hold spaces and ')', so parse after the
// last ')'. Returns false when the file cannot be read.
bool ReadProcStat(int32_t pid, char* state, uint64_t* start_ticks) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  *state = *p;
  // Fields after ')' start at field 3 (state); starttime is field 22.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  char* end = nullptr;
  *start_ticks = std::strtoull(p, &end, 10);
  return end != p;
}

bool ProcMounted() {
  static const bool mounted = access("/proc/self/stat", R_OK) == 0;
  return mounted;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

Status DefaultFreeSpace(const std::string& dir, uint64_t* free_bytes) {
  return FreeSpace(dir, free_bytes);
}

std::string NoSpaceMessage(const SharedSegmentOptions& o, uint64_t need, uint64_t free) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s needs %s in %s, which has %s free; enlarge %s (docker --shm-size) or "
                "%s (needs %" PRIu64 " bytes, %" PRIu64 " bytes free)",
                o.what.c_str(), FormatSize(need).c_str(), o.shm_dir.c_str(),
                FormatSize(free).c_str(), o.shm_dir.c_str(), o.remedy.c_str(), need, free);
  return buf;
}

// Parses "<prefix>.<pid>.<seq>"; returns the pid, or 0 when the name does not match.
int32_t ParseSegmentName(const std::string& entry, const std::string& prefix) {
  if (entry.size() <= prefix.size() + 1 || entry.compare(0, prefix.size(), prefix) != 0 ||
      entry[prefix.size()] != '.') {
    return 0;
  }
  const char* p = entry.c_str() + prefix.size() + 1;
  uint64_t pid = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9'; ++p, ++digits) pid = pid * 10 + static_cast<uint64_t>(*p - '0');
  if (digits == 0 || digits > 9 || *p != '.') return 0;
  ++p;
  if (*p == '\0') return 0;
  for (; *p; ++p) {
    if (*p < '0' || *p > '9') return 0;
  }
  return static_cast<int32_t>(pid);
}

// Reads the creator recorded in an object's header and its pid namespace (0
// when unknown: no /proc there, or a version 1 header, which had none);
// false when the object is too small or its header is not (yet) valid.
bool ReadCreator(const std::string& shm_name, ProcessIdentity* creator, uint64_t* pid_namespace) {
  int fd = shm_open(shm_name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  struct stat st;
  bool ok = false;
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= SharedSegment::kHeaderBytes) {
    void* p = mmap(nullptr, kPageBytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      const auto* h = static_cast<const SegmentHeader*>(p);
      if (h->magic.load(std::memory_order_acquire) == kSegmentMagic &&
          (h->version == 1 || h->version == kSegmentVersion)) {
        creator->pid = h->creator_pid;
        creator->start_ticks = h->creator_start_ticks;
        *pid_namespace = h->creator_pid_namespace;
        ok = true;
      }
      munmap(p, kPageBytes);
    }
  }
  close(fd);
  return ok;
}

}  // namespace

// ---------------------------------------------------------------- processes

namespace shm {

ProcessIdentity CurrentProcess() {
  (void)g_atfork_registered;
  ProcessIdentity p;
  p.pid = g_pid.load(std::memory_order_acquire);
  if (p.pid != 0) {
    p.start_ticks = g_start_ticks.load(std::memory_order_relaxed);
    return p;
  }
  p.pid = static_cast<int32_t>(getpid());
  char state = 0;
  if (!ReadProcStat(p.pid, &state, &p.start_ticks)) p.start_ticks = 0;
  g_start_ticks.store(p.start_ticks, std::memory_order_relaxed);
  g_pid.store(p.pid, std::memory_order_release);
  return p;
}

bool ProcessAlive(int32_t pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = 0;
  uint64_t ticks = 0;
  if (!ReadProcStat(pid, &state, &ticks)) {
    // Gone between kill() and the read, or no /proc at all (then trust kill).
    return !ProcMounted();
  }
  if (state == 'Z' || state == 'X') return false;
  if (start_ticks != 0 && ticks != 0 && ticks != start_ticks) return false;
  return true;
}

uint64_t PackProcess(const ProcessIdentity& p) {
  if (p.pid <= 0) return 0;
  constexpr uint64_t kTickMask = (uint64_t{1} << 42) - 1;
  return (static_cast<uint64_t>(p.pid) & 0x3FFFFF) | ((p.start_ticks & kTickMask) << 22);
}

ProcessIdentity UnpackProcess(uint64_t packed) {
  ProcessIdentity p;
  p.pid = static_cast<int32_t>(packed & 0x3FFFFF);
  p.start_ticks = packed >> 22;
  return p;
}

uint32_t ForkGeneration() { return g_fork_generation.load(std::memory_order_relaxed); }

uint64_t PidNamespace() {
  if (g_pid_namespace_known.load(std::memory_order_acquire)) {
    return g_pid_namespace.load(std::memory_order_relaxed);
  }
  struct stat st;
  const uint64_t id = stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  g_pid_namespace.store(id, std::memory_order_relaxed);
  g_pid_namespace_known.store(true, std::memory_order_release);
  return id;
}

// ---------------------------------------------------------------- futex

int FutexWait(const void* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts;
  timespec* tsp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000);
    tsp = &ts;
  }
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, nullptr, 0);
  return r == 0 ? 0 : errno;
}

void FutexWake(const void* word, int32_t count) {
  syscall(SYS_futex, word, FUTEX_WAKE, count, nullptr, nullptr, 0);
}

// ---------------------------------------------------------------- free space

Status FreeSpace(const std::string& dir, uint64_t* free_bytes) {
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) != 0) return Status::FromErrno("statvfs " + dir, errno);
  // Saturates: a file system larger than 2^64 bytes has "everything" free.
  *free_bytes = SaturatingMul(static_cast<uint64_t>(vfs.f_bavail), static_cast<uint64_t>(vfs.f_frsize));
  return Status::OK();
}

}  // namespace shm

// ---------------------------------------------------------------- segments

SharedSegment::SharedSegment(std::string name, char* base, uint64_t mapped_bytes, bool created)
    : name_(std::move(name)),
      base_(base),
      data_(base + kHeaderBytes),
      mapped_bytes_(mapped_bytes),
      data_bytes_(mapped_bytes - kHeaderBytes),
      created_(created),
      creator_pid_(created ? static_cast<int32_t>(getpid()) : 0) {}

SharedSegment::~SharedSegment() {
  munmap(base_, mapped_bytes_);
  if (IsCreatorProcess()) shm_unlink(name_.c_str());
}

bool SharedSegment::IsCreatorProcess() const {
  return created_ && creator_pid_ == static_cast<int32_t>(getpid());
}

ProcessIdentity SharedSegment::creator() const {
  const auto* h = reinterpret_cast<const SegmentHeader*>(base_);
  ProcessIdentity p;
  p.pid = h->creator_pid;
  p.start_ticks = h->creator_start_ticks;
  return p;
}

uint64_t SharedSegment::creator_pid_namespace() const {
  return reinterpret_cast<const SegmentHeader*>(base_)->creator_pid_namespace;
}

Status SharedSegment::Create(const SharedSegmentOptions& options, uint64_t data_bytes,
                             std::unique_ptr<SharedSegment>* out) {
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos) {
    return Status::InvalidArgument("shared segment prefix must be non-empty, without '/': \"" +
                                   options.prefix + "\"");
  }
  if (data_bytes == 0) return Status::InvalidArgument("shared segment of 0 bytes");
  if (options.remove_stale) {
    // Best effort: a directory we cannot scan must not stop the creation.
    RemoveStale(options.shm_dir, options.prefix, nullptr).PermitUncheckedError();
  }
  uint64_t free_bytes = 0;
  Status probe = options.free_space ? options.free_space(options.shm_dir, &free_bytes)
                                    : DefaultFreeSpace(options.shm_dir, &free_bytes);
  // Above kMaxSegmentBytes no mapping is attempted, whatever is free; the
  // message still names the real free space.
  if (data_bytes > kMaxSegmentBytes) {
    return Status::NoSpace(NoSpaceMessage(options, data_bytes, probe.ok() ? free_bytes : 0) +
                           "; a shared segment holds at most " + FormatSize(kMaxSegmentBytes));
  }
  const uint64_t total = kHeaderBytes + RoundUp(data_bytes, kPageBytes);
  const uint64_t checked =
      options.check_whole_size || !options.reserve || options.reserve_data_bytes >= data_bytes
          ? total
          : kHeaderBytes + RoundUp(options.reserve_data_bytes, kPageBytes);
  if (probe.ok() && free_bytes < checked) {
    return Status::NoSpace(NoSpaceMessage(options, checked, free_bytes));
  }
  // When the probe fails (no /dev/shm to statvfs), shm_open below reports it.

  const ProcessIdentity me = CurrentProcess();
  std::string name;
  int fd = -1;
  for (int attempt = 0; attempt < kMaxNameAttempts && fd < 0; ++attempt) {
    name = "/" + options.prefix + "." + std::to_string(me.pid) + "." +
           std::to_string(g_name_seq.fetch_add(1, std::memory_order_relaxed));
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    // EEXIST: left by an earlier process with our pid; take the next number.
    if (fd < 0 && errno != EEXIST) return Status::FromErrno("shm_open " + name, errno);
  }
  if (fd < 0) return Status::IOError("shm_open: no free name for prefix " + options.prefix);

  auto fail = [&](Status s) {
    close(fd);
    shm_unlink(name.c_str());
    return s;
  };
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const int e = errno;
    if (e == ENOSPC || e == EFBIG)
      return fail(Status::NoSpace(NoSpaceMessage(options, total, free_bytes)));
    return fail(Status::FromErrno("ftruncate " + name, e));
  }
  // tmpfs allocates pages on first touch; without a reservation a store
  // into a page that /dev/shm can no longer supply raises SIGBUS in
  // whichever process touches it. posix_fallocate makes the shortage an
  // error here, now, for the part reserved at creation; Reserve() does the
  // same for the rest. The header's page first, so that the header is
  // written (and a scan can tell whose object this is) before the long part.
  auto reserve = [&](uint64_t from, uint64_t to) {
    if (!options.reserve || to <= from) return Status::OK();
    const int e = posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(to - from));
    if (e == ENOSPC) {
      uint64_t now_free = 0;
      FreeSpace(options.shm_dir, &now_free).PermitUncheckedError();
      return Status::NoSpace(NoSpaceMessage(options, total, now_free));
    }
    return e == 0 ? Status::OK() : Status::FromErrno("posix_fallocate " + name, e);
  };
  Status reserved = reserve(0, kHeaderBytes);
  if (!reserved.ok()) return fail(reserved);
  // Mapped lazily, the creator too. MAP_POPULATE would map every page table
  // entry inside Create: the same CPU as the first-write faults it saves
  // (measured here: 58 ms populating 120 MiB against 65 ms of faults), but
  // all of it on the opener's critical path, where it was half the time to
  // the first batch after a restart; faults land on the threads that fill.
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(Status::FromErrno("mmap " + name, errno));

  auto* h = static_cast<SegmentHeader*>(base);
  h->version = kSegmentVersion;
  h->header_bytes = static_cast<uint32_t>(kHeaderBytes);
  h->mapped_bytes = total;
  h->data_bytes = total - kHeaderBytes;
  h->creator_pid = me.pid;
  h->creator_start_ticks = me.start_ticks;
  h->creator_pid_namespace = shm::PidNamespace();
  h->magic.store(kSegmentMagic, std::memory_order_release);

  reserved = reserve(kHeaderBytes, options.reserve_data_bytes >= total - kHeaderBytes
                                       ? total
                                       : RoundUp(kHeaderBytes + options.reserve_data_bytes,
                                                 kPageBytes));
  if (!reserved.ok()) {
    munmap(base, total);
    return fail(reserved);
  }
  close(fd);
  out->reset(new SharedSegment(name, static_cast<char*>(base), total, /*created=*/true));
  return Status::OK();
}

Status SharedSegment::Reserve(uint64_t offset, uint64_t length) const {
  if (length == 0) return Status::OK();
  if (offset > data_bytes_ || length > data_bytes_ - offset) {
    return Status::InvalidArgument("Reserve past the end of " + name_);
  }
  const int fd = shm_open(name_.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("shm_open " + name_, errno);
  const int e = posix_fallocate(fd, static_cast<off_t>(kHeaderBytes + offset),
                                static_cast<off_t>(length));
  close(fd);
  if (e == ENOSPC) {
    return Status::NoSpace("/dev/shm has no room for " + FormatSize(length) + " more of " + name_);
  }
  if (e != 0) return Status::FromErrno("posix_fallocate " + name_, e);
  return Status::OK();
}

Status SharedSegment::Attach(const std::string& name, std::unique_ptr<SharedSegment>* out) {
  return AttachMapped(name, /*read_only=*/false, out);
}

Status SharedSegment::AttachReadOnly(const std::string& name,
                                     std::unique_ptr<SharedSegment>* out) {
  return AttachMapped(name, /*read_only=*/true, out);
}

Status SharedSegment::AttachMapped(const std::string& name, bool read_only,
                                   std::unique_ptr<SharedSegment>* out) {
  int fd = shm_open(name.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("shm_open " + name, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Status::FromErrno("fstat " + name, e);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes + kPageBytes) {
    close(fd);
    return Status::Corruption(name + ": too small for a shared segment (" + std::to_string(size) +
                              " bytes)");
  }
  const int prot = read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  void* base = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);
  if (base == MAP_FAILED) return Status::FromErrno("mmap " + name, e);
  const auto* h = static_cast<const SegmentHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != kSegmentMagic || h->version != kSegmentVersion ||
      h->mapped_bytes != size) {
    munmap(base, size);
    return Status::Corruption(name + ": not an opt4store shared segment, or not initialized");
  }
  out->reset(new SharedSegment(name, static_cast<char*>(base), size, /*created=*/false));
  return Status::OK();
}

Status SharedSegment::RemoveStale(const std::string& shm_dir, const std::string& prefix,
                                  int* removed) {
  if (removed) *removed = 0;
  DIR* dir = opendir(shm_dir.c_str());
  if (dir == nullptr) return Status::FromErrno("opendir " + shm_dir, errno);
  const ProcessIdentity me = CurrentProcess();
  const uint64_t my_namespace = shm::PidNamespace();
  int count = 0;
  while (dirent* ent = readdir(dir)) {
    const std::string entry = ent->d_name;
    const int32_t pid = ParseSegmentName(entry, prefix);
    if (pid == 0) continue;
    const std::string shm_name = "/" + entry;
    ProcessIdentity creator;
    uint64_t pid_namespace = 0;
    if (!ReadCreator(shm_name, &creator, &pid_namespace) || creator.pid != pid ||
        (pid_namespace != 0 && pid_namespace != my_namespace)) {
      continue;  // not ours to judge: no header yet, or another pid namespace's
    }
    const bool mine = pid == me.pid && (creator.start_ticks == me.start_ticks ||
                                        creator.start_ticks == 0 || me.start_ticks == 0);
    if (!mine && !ProcessAlive(pid, creator.start_ticks) && shm_unlink(shm_name.c_str()) == 0) {
      ++count;
    }
  }
  closedir(dir);
  if (removed) *removed = count;
  return Status::OK();
}

}  // namespace opt4store
