#include "engine/base/fault_injection_env.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

namespace opt4store {

namespace {

class FaultInjectionFile final : public File {
 public:
  FaultInjectionFile(FaultInjectionEnv* env, std::unique_ptr<File> target)
      : env_(env), target_(std::move(target)) {}

  File* target() const { return target_.get(); }
  const std::string& path() const override { return target_->path(); }

  Status Write(uint64_t offset, const std::string_view* parts, size_t count) override {
    uint64_t total = 0;
    for (size_t i = 0; i < count; ++i) total += parts[i].size();
    const FaultInjectionEnv::Decision d = env_->Check(Fault::Op::kWrite, path(), total);
    if (!d.fire) return target_->Write(offset, parts, count);
    if (d.effect == Fault::Effect::kCrash && d.allowed_bytes == total) {
      target_->Write(offset, parts, count).PermitUncheckedError();
      Die();
    }
    // A disk that fills up mid-write leaves a prefix behind: write it.
    std::vector<std::string_view> prefix;
    uint64_t left = d.allowed_bytes;
    for (size_t i = 0; i < count && left > 0; ++i) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, parts[i].size()));
      prefix.push_back(parts[i].substr(0, n));
      left -= n;
    }
    if (!prefix.empty()) {
      OPT4STORE_RETURN_IF_ERROR(target_->Write(offset, prefix.data(), prefix.size()));
    }
    if (d.effect == Fault::Effect::kCrash) Die();
    return Status::FromErrno("write " + path() + " (injected)", d.error);
  }

  // What kill -9 does: no destructor, no flush; the page cache keeps what
  // was written.
  [[noreturn]] static void Die() {
    kill(getpid(), SIGKILL);
    _exit(137);  // not reached
  }

  Status Read(uint64_t offset, size_t n, char* scratch, size_t* result) override {
    const FaultInjectionEnv::Decision d = env_->Check(Fault::Op::kRead, path(), n);
    if (d.fire && d.effect == Fault::Effect::kError) {
      *result = 0;
      return Status::FromErrno("read " + path() + " (injected)", d.error);
    }
    if (d.fire) n = std::min(n, d.short_bytes);
    return target_->Read(offset, n, scratch, result);
  }

  Status Sync() override {
    const FaultInjectionEnv::Decision d = env_->Check(Fault::Op::kSync, path(), 0);
    if (d.fire) return Status::FromErrno("fdatasync " + path() + " (injected)", d.error);
    return target_->Sync();
  }

  Status Truncate(uint64_t size) override {
    const FaultInjectionEnv::Decision d = env_->Check(Fault::Op::kTruncate, path(), 0);
    if (d.fire) return Status::FromErrno("truncate " + path() + " (injected)", d.error);
    return target_->Truncate(size);
  }

  Status Size(uint64_t* size) override { return target_->Size(size); }
  bool direct_reads() const override { return target_->direct_reads(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<File> target_;
};

// Wraps a base queue: each outer request becomes an inner one on the target
// file, unless the rules fail it outright.
class FaultInjectionReadQueue final : public ReadQueue {
 public:
  FaultInjectionReadQueue(FaultInjectionEnv* env, std::unique_ptr<ReadQueue> base)
      : env_(env), base_(std::move(base)), slots_(base_->depth()) {
    for (size_t i = 0; i < slots_.size(); ++i) free_.push_back(slots_.size() - 1 - i);
  }
  ~FaultInjectionReadQueue() override {
    while (in_flight_ > 0) WaitOne();
  }

  unsigned depth() const override { return base_->depth(); }
  size_t in_flight() const override { return in_flight_; }
  bool uses_io_uring() const override { return base_->uses_io_uring(); }

  void Submit(ReadRequest* req) override {
    ++in_flight_;
    req->result = 0;
    req->status = Status::OK();
    auto* file = static_cast<FaultInjectionFile*>(req->file);
    const FaultInjectionEnv::Decision d =
        env_->Check(Fault::Op::kRead, file->path(), req->length);
    if (d.fire && d.effect == Fault::Effect::kError) {
      req->status = Status::FromErrno("read " + file->path() + " (injected)", d.error);
      failed_.push_back(req);
      return;
    }
    const size_t s = free_.back();
    free_.pop_back();
    Slot& slot = slots_[s];
    slot.outer = req;
    slot.short_bytes = d.fire ? d.short_bytes : SIZE_MAX;
    slot.inner.file = file->target();
    slot.inner.offset = req->offset;
    slot.inner.length = req->length;
    slot.inner.scratch = req->scratch;
    slot.inner.context = &slot;
    slot.inner.allow_direct = req->allow_direct;
    base_->Submit(&slot.inner);
  }

  ReadRequest* WaitOne() override {
    if (in_flight_ == 0) return nullptr;
    --in_flight_;
    if (!failed_.empty()) {
      ReadRequest* req = failed_.front();
      failed_.pop_front();
      return req;
    }
    ReadRequest* inner = base_->WaitOne();
    Slot* slot = static_cast<Slot*>(inner->context);
    ReadRequest* outer = slot->outer;
    outer->status = inner->status;
    outer->result = std::min(inner->result, slot->short_bytes);
    free_.push_back(static_cast<size_t>(slot - slots_.data()));
    return outer;
  }

 private:
  struct Slot {
    ReadRequest inner;
    ReadRequest* outer = nullptr;
    size_t short_bytes = SIZE_MAX;
  };

  FaultInjectionEnv* const env_;
  const std::unique_ptr<ReadQueue> base_;
  std::vector<Slot> slots_;
  std::vector<size_t> free_;
  std::deque<ReadRequest*> failed_;  // failed at Submit, handed back first
  size_t in_flight_ = 0;
};

}  // namespace

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base ? base : Env::Default()) {}
FaultInjectionEnv::~FaultInjectionEnv() = default;

int FaultInjectionEnv::Inject(const Fault& fault) {
  MutexLock lock(&mu_);
  const int id = static_cast<int>(fired_.size());
  fired_.push_back(0);
  Rule rule;
  rule.fault = fault;
  rule.id = id;
  rules_.push_back(rule);
  return id;
}

void FaultInjectionEnv::Clear() {
  MutexLock lock(&mu_);
  rules_.clear();
}

uint64_t FaultInjectionEnv::fired(int id) const {
  MutexLock lock(&mu_);
  return id >= 0 && static_cast<size_t>(id) < fired_.size() ? fired_[id] : 0;
}

uint64_t FaultInjectionEnv::reads() const {
  MutexLock lock(&mu_);
  return reads_;
}
uint64_t FaultInjectionEnv::writes() const {
  MutexLock lock(&mu_);
  return writes_;
}
uint64_t FaultInjectionEnv::bytes_written() const {
  MutexLock lock(&mu_);
  return bytes_written_;
}

FaultInjectionEnv::Decision FaultInjectionEnv::Check(Fault::Op op, const std::string& path,
                                                     uint64_t n) {
  std::function<void()> call;
  Decision d = Decide(op, path, n, &call);
  if (call) call();  // without mu_: it may do I/O through this Env
  return d;
}

FaultInjectionEnv::Decision FaultInjectionEnv::Decide(Fault::Op op, const std::string& path,
                                                      uint64_t n, std::function<void()>* call) {
  MutexLock lock(&mu_);
  if (op == Fault::Op::kRead) ++reads_;
  if (op == Fault::Op::kWrite) ++writes_;
  Decision d;
  for (Rule& rule : rules_) {
    const Fault& f = rule.fault;
    if (f.op != op || rule.fired >= f.times) continue;
    if (!f.path_contains.empty() && path.find(f.path_contains) == std::string::npos) continue;
    if (op == Fault::Op::kWrite && rule.bytes_seen + n <= f.after_bytes) {
      rule.bytes_seen += n;  // still below the mark: not a candidate yet
      continue;
    }
    if (++rule.seen <= f.skip) {
      if (op == Fault::Op::kWrite) rule.bytes_seen += n;
      continue;
    }
    ++rule.fired;
    ++fired_[rule.id];
    if (f.effect == Fault::Effect::kCall) {
      *call = f.call;
      break;  // the operation goes on unharmed
    }
    d.fire = true;
    d.effect = f.effect;
    d.error = f.error;
    d.short_bytes = f.short_bytes;
    if (op == Fault::Op::kWrite) {
      d.allowed_bytes = f.whole_write                  ? n
                        : f.after_bytes > rule.bytes_seen ? f.after_bytes - rule.bytes_seen
                                                          : 0;
      rule.bytes_seen += d.allowed_bytes;
    }
    break;
  }
  if (op == Fault::Op::kWrite) bytes_written_ += d.fire ? d.allowed_bytes : n;
  return d;
}

Status FaultInjectionEnv::OpenFile(const std::string& path, const FileOptions& options,
                                   std::unique_ptr<File>* file) {
  std::unique_ptr<File> target;
  OPT4STORE_RETURN_IF_ERROR(base_->OpenFile(path, options, &target));
  file->reset(new FaultInjectionFile(this, std::move(target)));
  return Status::OK();
}

Status FaultInjectionEnv::NewReadQueue(const ReadQueueOptions& options,
                                       std::unique_ptr<ReadQueue>* queue) {
  std::unique_ptr<ReadQueue> base;
  OPT4STORE_RETURN_IF_ERROR(base_->NewReadQueue(options, &base));
  queue->reset(new FaultInjectionReadQueue(this, std::move(base)));
  return Status::OK();
}

}  // namespace opt4store
