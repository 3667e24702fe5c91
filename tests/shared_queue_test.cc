// SharedQueue: order and integrity, a full ring says Busy, wrap-around with
// padding, producers in several processes (each message exactly once and
// intact), a producer killed mid-push or while holding the robust mutex
// wedges nothing, and the consumer sleeps on a futex until a commit.
#include "tiers/shared_queue.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ram_test_values.h"
#include "fork_child.h"
#include "test_util.h"

namespace opt4store {
namespace {

using Clock = std::chrono::steady_clock;
using opt4store_test::Reap;
using opt4store_test::FillPayload;
using opt4store_test::Mix;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

std::string TestPrefix(const std::string& what) {
  return "o4s-qtest-" + what + "-" + std::to_string(getpid());
}

// reserve_step: as SharedQueueOptions; the default reserves the whole ring
// at creation for the rings of most tests.
std::unique_ptr<SharedQueue> MakeQueue(uint64_t capacity, const std::string& what,
                                       uint64_t reserve_step = 4 * kMiB) {
  SharedQueueOptions o;
  o.capacity_bytes = capacity;
  o.reserve_step_bytes = reserve_step;
  o.name_prefix = TestPrefix(what);
  std::unique_ptr<SharedQueue> q;
  Status s = SharedQueue::Create(o, &q);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return q;
}

// A message of (producer, seq): a 16-byte header naming both, then a body
// whose size and bytes derive from them.
uint64_t BodySize(uint64_t producer, uint64_t seq, uint64_t max_body) {
  return Mix(producer * 7919 + seq) % (max_body + 1);
}

Status PushMessage(SharedQueue* q, uint64_t producer, uint64_t seq, uint64_t max_body) {
  uint64_t head[2] = {producer, seq};
  std::string body(BodySize(producer, seq, max_body), '\0');
  FillPayload(producer, seq, &body[0], body.size());
  iovec parts[2];
  parts[0].iov_base = head;
  parts[0].iov_len = sizeof head;
  parts[1].iov_base = &body[0];
  parts[1].iov_len = body.size();
  return q->TryPushv(static_cast<uint32_t>(producer + 100), parts, 2);
}

// Checks a popped message; returns its (producer, seq) or false when torn.
bool CheckMessage(const QueueMessage& m, uint64_t max_body, uint64_t* producer, uint64_t* seq) {
  if (m.size < 16) return false;
  std::memcpy(producer, m.data, 8);
  std::memcpy(seq, m.data + 8, 8);
  if (m.tag != *producer + 100) return false;
  const uint64_t size = BodySize(*producer, *seq, max_body);
  if (m.size != 16 + size) return false;
  std::string expect(size, '\0');
  FillPayload(*producer, *seq, &expect[0], size);
  return std::memcmp(m.data + 16, expect.data(), size) == 0;
}

// Random pushes (sizes up to the limit) and pops, each popped message
// checked against a model; returns how many pushes found the ring full.
uint64_t PushAndPopAgainstModel(SharedQueue* q, uint64_t seed, int steps) {
  std::deque<std::pair<uint32_t, std::string>> model;
  std::mt19937_64 rng(seed);
  uint64_t busy = 0;
  uint32_t tag;
  std::string data;
  for (int step = 0; step < steps; ++step) {
    if (rng() % 2) {
      const uint64_t size = rng() % 4 == 0 ? rng() % (q->max_message_bytes() + 1) : rng() % 3000;
      std::string v(size, '\0');
      FillPayload(step, 0, &v[0], size);
      const uint32_t t = static_cast<uint32_t>(step);
      Status ps = q->TryPush(t, v.data(), v.size());
      if (ps.ok()) {
        model.emplace_back(t, std::move(v));
      } else {
        REQUIRE(ps.IsBusy());
        ++busy;
      }
    } else if (!model.empty()) {
      REQUIRE(q->TryPop(&tag, &data).ok());
      REQUIRE(tag == model.front().first);
      REQUIRE(data == model.front().second);
      model.pop_front();
    } else {
      QueueMessage m;
      REQUIRE(q->Front(&m).IsNotFound());
    }
  }
  return busy;
}

TEST_CASE("SharedQueue: messages come out in order, intact, with their tags", "[queue]") {
  auto q = MakeQueue(1 * kMiB, "order");
  CHECK(q->IsConsumer());
  QueueMessage m;
  CHECK(q->Front(&m).IsNotFound());
  for (uint64_t seq = 0; seq < 50; ++seq) REQUIRE(PushMessage(q.get(), 1, seq, 8 * kKiB).ok());
  REQUIRE(q->TryPush(7, nullptr, 0).ok());  // an empty message is fine
  for (uint64_t seq = 0; seq < 50; ++seq) {
    REQUIRE(q->Front(&m).ok());
    uint64_t producer = 0, got = 0;
    REQUIRE(CheckMessage(m, 8 * kKiB, &producer, &got));
    CHECK(producer == 1);
    CHECK(got == seq);
    q->Pop();
  }
  uint32_t tag = 0;
  std::string data = "x";
  REQUIRE(q->TryPop(&tag, &data).ok());
  CHECK(tag == 7);
  CHECK(data.empty());
  CHECK(q->Front(&m).IsNotFound());
  SharedQueueStats s = q->Stats();
  CHECK(s.pushes == 51);
  CHECK(s.pops == 51);
  CHECK(s.used_bytes == 0);
}

TEST_CASE("SharedQueue: a full ring says Busy at once; wrap-around keeps every byte", "[queue]") {
  auto q = MakeQueue(64 * kKiB, "full");
  CHECK(q->max_message_bytes() == 32 * kKiB - 64);
  const std::string big(q->max_message_bytes() + 1, 'x');
  CHECK(q->TryPush(1, big.data(), big.size()).IsInvalidArgument());

  // Fill with 10 KiB messages: six fit in 64 KiB (with headers), the 7th not.
  const std::string ten(10 * kKiB, 't');
  int pushed = 0;
  Status s;
  while ((s = q->TryPush(1, ten.data(), ten.size())).ok()) ++pushed;
  CHECK(s.IsBusy());
  CHECK(pushed == 6);
  CHECK(q->Stats().full_rejects == 1);
  uint32_t tag;
  std::string data;
  REQUIRE(q->TryPop(&tag, &data).ok());
  REQUIRE(q->TryPush(1, ten.data(), ten.size()).ok());

  // A random mix against a model: sizes up to the limit, so records often
  // meet the end of the ring and a padding record sends them to the start.
  while (q->TryPop(&tag, &data).ok()) {
  }
  const uint64_t busy = PushAndPopAgainstModel(q.get(), 3, 20000);
  CHECK(busy > 0);
  // The largest message always fits into an empty ring, wherever the head is.
  while (q->TryPop(&tag, &data).ok()) {
  }
  const std::string max(q->max_message_bytes(), 'm');
  for (int i = 0; i < 10; ++i) {
    REQUIRE(q->TryPush(2, max.data(), max.size()).ok());
    REQUIRE(q->TryPop(&tag, &data).ok());
    REQUIRE(data == max);
    const std::string shift(3 + 7 * i, 's');  // moves the head to another offset
    REQUIRE(q->TryPush(3, shift.data(), shift.size()).ok());
    REQUIRE(q->TryPop(&tag, &data).ok());
  }
}

// The bytes tmpfs has allocated to the queue's segment (reserved or written).
uint64_t AllocatedBytes(const SharedQueue& q) {
  struct stat st;
  REQUIRE(stat(("/dev/shm" + q.name()).c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_CASE("SharedQueue: reserves /dev/shm a step at a time as the tail first needs it",
          "[queue]") {
  auto q = MakeQueue(8 * kMiB, "reserve", 1 * kMiB);
  CHECK(q->Stats().reserved_bytes == 1 * kMiB);
  CHECK(AllocatedBytes(*q) < 1 * kMiB + 16 * kKiB);  // the step and the headers' pages
  uint32_t tag;
  std::string data;
  // 30 messages of 100 KiB: the tail nears 3 MiB, and the reserved part
  // follows it in steps of 1 MiB.
  std::vector<std::string> backlog;
  for (int i = 0; i < 30; ++i) {
    backlog.emplace_back(100 * kKiB, '\0');
    FillPayload(i, 1, &backlog.back()[0], backlog.back().size());
    REQUIRE(q->TryPush(2, backlog.back().data(), backlog.back().size()).ok());
  }
  CHECK(q->Stats().reserved_bytes == 3 * kMiB);
  CHECK(AllocatedBytes(*q) >= 3 * kMiB);
  CHECK(AllocatedBytes(*q) < 3 * kMiB + 16 * kKiB);
  for (const std::string& want : backlog) {
    REQUIRE(q->TryPop(&tag, &data).ok());
    REQUIRE(data == want);
  }
  // A message larger than a step reserves as far as it needs in one go.
  const std::string max(q->max_message_bytes(), 'm');
  REQUIRE(q->TryPush(3, max.data(), max.size()).ok());
  // Records of 64-byte header + payload, and one header past the last one.
  const uint64_t end = 30 * (64 + 100 * kKiB) + 4 * kMiB + 64;
  CHECK(q->Stats().reserved_bytes == (end + 4095) / 4096 * 4096);
  REQUIRE(q->TryPop(&tag, &data).ok());
  REQUIRE(data == max);
  // 10 MiB of small messages: the tail's first lap reaches the ring's end.
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(q->TryPush(1, max.data(), 10 * kKiB).ok());
    REQUIRE(q->TryPop(&tag, &data).ok());
  }
  CHECK(q->Stats().reserved_bytes == q->capacity_bytes());
  CHECK(AllocatedBytes(*q) < q->capacity_bytes() + 16 * kKiB);
  CHECK(q->Stats().reserve_failures == 0);

  // Random sizes and backlogs over a ring that grows in 64 KiB steps.
  auto r = MakeQueue(1 * kMiB, "reserve-mix", 64 * kKiB);
  CHECK(PushAndPopAgainstModel(r.get(), 5, 20000) > 0);
  CHECK(r->Stats().reserved_bytes == r->capacity_bytes());
  CHECK(r->Stats().reserve_failures == 0);
}

TEST_CASE("SharedQueue: producers in several processes deliver every message once, intact",
          "[queue][multiprocess]") {
  // Steps of 256 KiB: the producers also grow the ring's reserved part.
  auto q = MakeQueue(2 * kMiB, "multi", 256 * kKiB);
  const int kProducers = 4;
  const uint64_t kPerProducer = 1500, kMaxBody = 200 * kKiB;
  std::vector<pid_t> pids;
  const pid_t parent = getpid();
  for (int p = 0; p < kProducers; ++p) {
    std::fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      opt4store_test::DieWithParent(parent);  // a producer spins on a full queue
      // Half the producers use the inherited handle, half attach by name.
      std::unique_ptr<SharedQueue> own;
      SharedQueue* target = q.get();
      if (p % 2 == 1) {
        if (!SharedQueue::Attach(q->name(), &own).ok()) _exit(3);
        target = own.get();
      }
      for (uint64_t seq = 0; seq < kPerProducer; ++seq) {
        for (;;) {
          Status s = PushMessage(target, p, seq, kMaxBody);
          if (s.ok()) break;
          if (!s.IsBusy()) _exit(4);
          std::this_thread::yield();  // the ring is full: the consumer drains it
        }
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<uint64_t> next(kProducers, 0);
  uint64_t received = 0, torn = 0, out_of_order = 0;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (received < kProducers * kPerProducer && Clock::now() < deadline) {
    Status s = q->WaitForMessage(1000);
    if (!s.ok()) continue;
    QueueMessage m;
    REQUIRE(q->Front(&m).ok());
    uint64_t producer = 0, seq = 0;
    if (!CheckMessage(m, kMaxBody, &producer, &seq) || producer >= kProducers) {
      ++torn;
    } else {
      if (seq != next[producer]) ++out_of_order;
      next[producer] = seq + 1;
    }
    q->Pop();
    ++received;
  }
  for (pid_t pid : pids) {
    const int status = Reap(pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(received == kProducers * kPerProducer);
  CHECK(torn == 0);
  CHECK(out_of_order == 0);
  CHECK(q->Stats().reserve_failures == 0);
  for (int p = 0; p < kProducers; ++p) CHECK(next[p] == kPerProducer);
  QueueMessage m;
  CHECK(q->Front(&m).IsNotFound());
  SharedQueueStats s = q->Stats();
  CHECK(s.pushes == kProducers * kPerProducer);
  CHECK(s.pops == kProducers * kPerProducer);
  WARN("4 producers x 1500 messages of up to 200 KiB through a 2 MiB ring: "
       << s.full_rejects << " pushes found it full, " << s.bytes_pushed / kMiB << " MiB moved");
}

// ---- producers that die

struct KillAt {
  SharedQueue::PushStage stage;
};

void KillHook(void* arg, SharedQueue::PushStage stage) {
  if (stage == static_cast<KillAt*>(arg)->stage) raise(SIGKILL);
}

// Forks a producer that pushes `before` good messages, then dies at `stage`
// of its next push.
void ProducerDiesAt(SharedQueue* q, SharedQueue::PushStage stage, int before) {
  std::fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int i = 0; i < before; ++i) {
      if (!PushMessage(q, 9, i, 10 * kKiB).ok()) _exit(3);
    }
    static KillAt at;
    at.stage = stage;
    q->SetPushHookForTesting(&KillHook, &at);
    PushMessage(q, 9, before, 10 * kKiB).PermitUncheckedError();
    _exit(4);  // not reached
  }
  const int status = Reap(pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("SharedQueue: a producer killed mid-push does not wedge the queue",
          "[queue][multiprocess]") {
  auto q = MakeQueue(256 * kKiB, "dead");
  const auto stage =
      GENERATE(SharedQueue::PushStage::kReserved, SharedQueue::PushStage::kHalfWritten);
  ProducerDiesAt(q.get(), stage, 3);
  // Its record stays uncommitted behind three good ones; others go on.
  REQUIRE(PushMessage(q.get(), 1, 0, 10 * kKiB).ok());
  for (uint64_t i = 0; i < 3; ++i) {
    REQUIRE(q->WaitForMessage(5000).ok());
    QueueMessage m;
    REQUIRE(q->Front(&m).ok());
    uint64_t producer, seq;
    REQUIRE(CheckMessage(m, 10 * kKiB, &producer, &seq));
    CHECK(producer == 9);
    CHECK(seq == i);
    q->Pop();
  }
  // The dead producer's record is skipped; the next message follows.
  const Clock::time_point t0 = Clock::now();
  REQUIRE(q->WaitForMessage(5000).ok());
  CHECK(Clock::now() - t0 < std::chrono::seconds(1));
  QueueMessage m;
  REQUIRE(q->Front(&m).ok());
  uint64_t producer, seq;
  REQUIRE(CheckMessage(m, 10 * kKiB, &producer, &seq));
  CHECK(producer == 1);
  q->Pop();
  CHECK(q->Front(&m).IsNotFound());
  CHECK(q->Stats().dead_skipped == 1);
  CHECK(q->Stats().used_bytes == 0);
}

// A producer that stops once its record is reserved until it reads a byte
// from `go`, then commits and exits.
struct WaitForGo {
  int go;
};

void WaitForGoHook(void* arg, SharedQueue::PushStage stage) {
  char byte;
  if (stage == SharedQueue::PushStage::kReserved &&
      read(static_cast<WaitForGo*>(arg)->go, &byte, 1) != 1) {
    _exit(5);
  }
}

// The consumer's stuck hook: lets the producer go, and returns once it has
// exited (a zombie: waitid's WNOWAIT leaves it unreaped).
struct LetGo {
  int go;
  pid_t producer;
};

void LetGoHook(void* arg) {
  const LetGo* l = static_cast<LetGo*>(arg);
  if (write(l->go, "g", 1) != 1) return;
  siginfo_t info;
  while (waitid(P_PID, l->producer, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
}

TEST_CASE("SharedQueue: a record committed just before its producer exited is not skipped",
          "[queue][multiprocess]") {
  // The consumer finds the head record reserved; before it asks whether
  // the producer lives, the producer commits, and exits (a DataLoader
  // worker at an epoch's end, while the owner's planner thread was
  // descheduled under load). The producer is dead when asked, yet its
  // record is complete: skipping it lost a Put (before the fix: the queue
  // came out empty).
  auto q = MakeQueue(256 * kKiB, "exiting");
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  std::fflush(stdout);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipe_fds[1]);
    static WaitForGo wait_for_go;
    wait_for_go.go = pipe_fds[0];
    q->SetPushHookForTesting(&WaitForGoHook, &wait_for_go);
    _exit(PushMessage(q.get(), 7, 0, 10 * kKiB).ok() ? 0 : 3);
  }
  close(pipe_fds[0]);
  // Reserved: the tail has moved.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  while (q->Stats().used_bytes == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(q->Stats().used_bytes > 0);
  LetGo let_go{pipe_fds[1], pid};
  q->SetStuckHookForTesting(&LetGoHook, &let_go);
  QueueMessage m;
  const Status first = q->Front(&m);
  q->SetStuckHookForTesting(nullptr, nullptr);
  const int status = Reap(pid);
  close(pipe_fds[1]);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  INFO(first.ToString());
  REQUIRE(first.ok());
  uint64_t producer, seq;
  REQUIRE(CheckMessage(m, 10 * kKiB, &producer, &seq));
  CHECK(producer == 7);
  CHECK(seq == 0);
  q->Pop();
  CHECK(q->Stats().dead_skipped == 0);
  CHECK(q->Front(&m).IsNotFound());
}

TEST_CASE("SharedQueue: the robust mutex recovers after its holder is SIGKILLed",
          "[queue][multiprocess]") {
  auto q = MakeQueue(256 * kKiB, "robust");
  ProducerDiesAt(q.get(), SharedQueue::PushStage::kHoldingLock, 2);
  // The next producer gets EOWNERDEAD, makes the mutex consistent, goes on.
  REQUIRE(PushMessage(q.get(), 1, 0, 10 * kKiB).ok());
  CHECK(q->Stats().lock_recoveries == 1);
  REQUIRE(PushMessage(q.get(), 1, 1, 10 * kKiB).ok());
  CHECK(q->Stats().lock_recoveries == 1);
  // A second producer process can lock it too.
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(PushMessage(q.get(), 2, 0, 10 * kKiB).ok() ? 0 : 1);
  const int status = Reap(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The dead holder had not moved the tail: nothing of it is visible.
  std::vector<std::pair<uint64_t, uint64_t>> got;
  QueueMessage m;
  while (q->Front(&m).ok()) {
    uint64_t producer, seq;
    REQUIRE(CheckMessage(m, 10 * kKiB, &producer, &seq));
    got.emplace_back(producer, seq);
    q->Pop();
  }
  const std::vector<std::pair<uint64_t, uint64_t>> expect = {
      {9, 0}, {9, 1}, {1, 0}, {1, 1}, {2, 0}};
  CHECK(got == expect);
  CHECK(q->Stats().dead_skipped == 0);
}

TEST_CASE("SharedQueue: the consumer sleeps until a producer commits", "[queue]") {
  auto q = MakeQueue(64 * kKiB, "wait");
  const Clock::time_point t0 = Clock::now();
  CHECK(q->WaitForMessage(50).IsBusy());
  CHECK(Clock::now() - t0 >= std::chrono::milliseconds(50));
  std::fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    _exit(q->TryPush(5, "wake", 4).ok() ? 0 : 1);
  }
  const Clock::time_point t1 = Clock::now();
  REQUIRE(q->WaitForMessage(10000).ok());
  CHECK(Clock::now() - t1 < std::chrono::seconds(5));
  uint32_t tag;
  std::string data;
  REQUIRE(q->TryPop(&tag, &data).ok());
  CHECK(tag == 5);
  CHECK(data == "wake");
  CHECK(WEXITSTATUS(Reap(pid)) == 0);
}

TEST_CASE("SharedQueue: roles, attach and creation errors", "[queue]") {
  auto q = MakeQueue(64 * kKiB, "roles");
  std::unique_ptr<SharedQueue> producer;
  REQUIRE(SharedQueue::Attach(q->name(), &producer).ok());
  CHECK_FALSE(producer->IsConsumer());
  QueueMessage m;
  CHECK(producer->Front(&m).IsInvalidArgument());
  REQUIRE(producer->TryPush(1, "x", 1).ok());
  REQUIRE(q->Front(&m).ok());

  // The free-space check covers what Create reserves, not the capacity: a
  // 1 GiB queue opens where 100 MiB are free (before: NoSpace, and no store
  // opened in Docker's 64 MiB /dev/shm), not where its first step is not.
  SharedQueueOptions o;
  o.capacity_bytes = 1ull << 30;
  o.reserve_step_bytes = 4 * kMiB;
  o.name_prefix = TestPrefix("small");
  uint64_t free_now = 100 * kMiB;
  o.free_space_for_testing = [&free_now](const std::string&, uint64_t* free_bytes) {
    *free_bytes = free_now;
    return Status::OK();
  };
  std::unique_ptr<SharedQueue> none;
  Status s = SharedQueue::Create(o, &none);
  INFO(s.ToString());
  REQUIRE(s.ok());
  none.reset();
  free_now = 2 * kMiB;
  s = SharedQueue::Create(o, &none);
  INFO(s.ToString());
  REQUIRE(s.IsNoSpace());
  CHECK(s.message().find("shared queue needs 4.01 MiB in /dev/shm, which has 2.00 MiB free") !=
        std::string::npos);
  o.capacity_bytes = 100;
  CHECK(SharedQueue::Create(o, &none).IsInvalidArgument());
  CHECK(SharedQueue::Attach("/o4s-no-such-queue", &none).IsNotFound());
}

TEST_CASE("SharedQueue: a full queue whose consumer died is an IOError", "[queue]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::unique_ptr<SharedQueue> q;
    SharedQueueOptions o;
    o.capacity_bytes = 16 * kKiB;
    o.name_prefix = TestPrefix("orphan");
    if (!SharedQueue::Create(o, &q).ok()) _exit(1);
    char name[256] = {0};
    std::snprintf(name, sizeof name, "%s", q->name().c_str());
    if (write(fds[1], name, sizeof name) != sizeof name) _exit(2);
    q.release();  // die without unlinking, as after kill -9
    _exit(0);
  }
  close(fds[1]);
  char name[256] = {0};
  REQUIRE(read(fds[0], name, sizeof name) == static_cast<ssize_t>(sizeof name));
  close(fds[0]);
  Reap(pid);
  std::unique_ptr<SharedQueue> q;
  REQUIRE(SharedQueue::Attach(name, &q).ok());
  const std::string v(1000, 'v');
  Status s;
  while ((s = q->TryPush(1, v.data(), v.size())).ok()) {
  }
  CHECK(s.IsIOError());
  shm_unlink(name);
}

}  // namespace
}  // namespace opt4store
