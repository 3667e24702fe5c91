// See copy_helpers.h.
#include "engine/store/copy_helpers.h"

#include <algorithm>

#include "tiers/shared_memory.h"

namespace opt4store {

int CopyHelpers::DefaultCount() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores - 1, 0, 3);
}

CopyHelpers::CopyHelpers(int helpers)
    : count_(std::max(helpers, 0)), fork_generation_(shm::ForkGeneration()) {}

CopyHelpers::~CopyHelpers() {
  if (!started_.load()) return;
  if (fork_generation_ != shm::ForkGeneration()) return;  // a forked child: no threads here
  stop_.store(true);
  generation_.fetch_add(1);
  shm::FutexWake(&generation_, INT32_MAX);
  for (std::thread* t : threads_) {
    t->join();
    delete t;
  }
}

void CopyHelpers::Start() {
  for (int k = 0; k < count_; ++k) threads_.push_back(new std::thread([this] { HelperLoop(); }));
  started_.store(true);
}

void CopyHelpers::Run(size_t n, const std::function<void(size_t)>& fn) {
  const bool forked = fork_generation_ != shm::ForkGeneration();
  if (count_ == 0 || n < kMinParallel || forked || busy_.exchange(true)) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (!started_.load()) Start();
  n_ = n;
  fn_ = &fn;
  next_.store(0);
  generation_.fetch_add(1);
  open_.store(true);
  shm::FutexWake(&generation_, INT32_MAX);
  Drain();
  open_.store(false);
  // A helper still counted may be inside fn: wait for it (one call at most).
  while (users_.load() != 0) std::this_thread::yield();
  fn_ = nullptr;
  busy_.store(false);
}

void CopyHelpers::Drain() {
  for (size_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i);
}

void CopyHelpers::HelperLoop() {
  uint32_t seen = 0;
  for (;;) {
    const uint32_t now = generation_.load();
    if (now == seen) {
      shm::FutexWait(&generation_, now, -1);
      continue;
    }
    seen = now;
    if (stop_.load()) return;
    users_.fetch_add(1);
    // Only the job of the generation that woke us, and only while it is
    // open: otherwise its caller may have returned, and fn_ with it.
    if (open_.load() && generation_.load() == now) Drain();
    users_.fetch_sub(1);
  }
}

}  // namespace opt4store
