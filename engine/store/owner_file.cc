#include "engine/store/owner_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "engine/store/manifest.h"
#include "tiers/shared_memory.h"

namespace opt4store {
namespace {

constexpr char kOwnerFormat[] = "opt4store-owner 1";

std::string OwnerPath(const std::string& dir) { return dir + "/" + kOwnerFileName; }

bool ParseNumber(const std::string& text, uint64_t* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *value = v;
  return true;
}

}  // namespace

Status WriteOwnerFile(const std::string& dir, const std::string& control_block) {
  const shm::ProcessIdentity me = shm::CurrentProcess();
  const std::string text =
      std::string("format=") + kOwnerFormat + "\npid=" + std::to_string(me.pid) +
      "\nstart_ticks=" + std::to_string(me.start_ticks) + "\ncontrol_block=" + control_block + "\n";
  const std::string tmp = OwnerPath(dir) + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(tmp, errno);
  const ssize_t n = write(fd, text.data(), text.size());
  const int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    unlink(tmp.c_str());
    return n < 0 ? Status::FromErrno(tmp, e) : Status::IOError(tmp + ": short write");
  }
  if (rename(tmp.c_str(), OwnerPath(dir).c_str()) != 0) {
    const int re = errno;
    unlink(tmp.c_str());
    return Status::FromErrno("rename " + tmp, re);
  }
  return Status::OK();
}

Status RemoveOwnerFile(const std::string& dir) {
  OwnerRecord record;
  if (!ReadOwnerFile(dir, &record).ok()) return Status::OK();
  // Another process's (a later owner's, were this one's lock lost) stays.
  if (record.pid != shm::CurrentProcess().pid) return Status::OK();
  if (unlink(OwnerPath(dir).c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno(OwnerPath(dir), errno);
  }
  return Status::OK();
}

Status ReadOwnerFile(const std::string& dir, OwnerRecord* record) {
  const std::string path = OwnerPath(dir);
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound(path);
    return Status::FromErrno(path, errno);
  }
  std::string text;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < 4096) text.append(buf, n);
  std::fclose(f);
  std::map<std::string, std::string> kv;
  uint64_t pid = 0;
  uint64_t ticks = 0;
  if (!ParseKeyValueLines(text, &kv).ok() || kv["format"] != kOwnerFormat ||
      !ParseNumber(kv["pid"], &pid) || pid == 0 || pid > INT32_MAX ||
      !ParseNumber(kv["start_ticks"], &ticks) || kv["control_block"].empty()) {
    return Status::Corruption(path + " is not an opt4store owner file");
  }
  record->pid = static_cast<int32_t>(pid);
  record->start_ticks = ticks;
  record->control_block = kv["control_block"];
  return Status::OK();
}

}  // namespace opt4store
