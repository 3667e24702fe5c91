// Plan: the generators exactly as plan.h documents them, reimplemented here
// from the comment alone (Mix64, EpochSeed, SplitMix64, Lemire's Below,
// Fisher-Yates, torch's DistributedSampler index logic) and compared element
// by element; the shapes; file and explicit plans; Describe(); validation.
// Longer than 600 lines because: every sampler kind against its torch
// reference, sharing one set of reference fixtures, in one binary (a test
// binary links the whole store: about 15 s each on the 2-core CI machine).
#include "opt4store/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test_util.h"

namespace opt4store {
namespace {

using opt4store_test::LE;
using opt4store_test::NamesNumber;
using opt4store_test::TempDir;
using opt4store_test::WriteBytes;

// ------------------------------------------- the reference, from plan.h alone

namespace ref {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t EpochSeed(uint64_t s, uint64_t e) { return Mix64(s + kGolden * (e + 1)); }

struct Rng {
  uint64_t state;
  uint64_t Draw() {
    state += kGolden;
    return Mix64(state);
  }
  // Lemire: m = draw * n (128-bit); redraw while low64(m) < (2^64 - n) mod n.
  uint64_t Below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // (2^64 - n) mod n
    unsigned __int128 m = static_cast<unsigned __int128>(Draw()) * n;
    while (static_cast<uint64_t>(m) < threshold) {
      m = static_cast<unsigned __int128>(Draw()) * n;
    }
    return static_cast<uint64_t>(m >> 64);
  }
};

std::vector<ItemId> Sequential(uint64_t n) {
  std::vector<ItemId> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

std::vector<ItemId> Shuffle(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<ItemId> p = Sequential(n);
  Rng rng{EpochSeed(seed, epoch)};
  for (uint64_t i = n - 1; n > 1 && i >= 1; --i) {
    std::swap(p[i], p[rng.Below(i + 1)]);
  }
  return p;
}

std::vector<ItemId> Replacement(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t draws) {
  Rng rng{EpochSeed(seed, epoch)};
  std::vector<ItemId> out(draws);
  for (auto& v : out) v = static_cast<ItemId>(rng.Below(n));
  return out;
}

// torch.utils.data.DistributedSampler.__iter__, line by line:
//   if not drop_last:
//       padding_size = total_size - len(indices)
//       if padding_size <= len(indices): indices += indices[:padding_size]
//       else: indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
//   else:
//       indices = indices[:total_size]
//   indices = indices[rank:total_size:num_replicas]
// with num_samples = ceil((N - W) / W) if drop_last and N % W != 0 else ceil(N / W),
// total_size = num_samples * W.
std::vector<ItemId> TorchPadded(const std::vector<ItemId>& perm, uint64_t w, bool drop_last,
                                uint64_t* total_size) {
  const uint64_t n = perm.size();
  uint64_t num_samples;
  if (drop_last && n % w != 0) {
    num_samples = static_cast<uint64_t>(
        std::max(0.0, std::ceil((static_cast<double>(n) - static_cast<double>(w)) /
                                static_cast<double>(w))));
  } else {
    num_samples = static_cast<uint64_t>(std::ceil(static_cast<double>(n) / static_cast<double>(w)));
  }
  *total_size = num_samples * w;
  std::vector<ItemId> indices = perm;
  if (!drop_last) {
    const uint64_t padding = *total_size - n;
    if (padding <= n) {
      indices.insert(indices.end(), perm.begin(), perm.begin() + padding);
    } else {
      const uint64_t copies = (padding + n - 1) / n;
      std::vector<ItemId> repeated;
      for (uint64_t c = 0; c < copies; ++c) repeated.insert(repeated.end(), perm.begin(), perm.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding);
    }
  } else {
    indices.resize(*total_size);
  }
  REQUIRE(indices.size() == *total_size);
  return indices;
}

std::vector<ItemId> Distributed(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t w,
                                uint64_t rank, bool drop_last) {
  uint64_t total = 0;
  const std::vector<ItemId> padded = TorchPadded(Shuffle(n, seed, epoch), w, drop_last, &total);
  std::vector<ItemId> out;
  for (uint64_t i = rank; i < total; i += w) out.push_back(padded[i]);
  return out;
}

}  // namespace ref

// ------------------------------------------------------------------ helpers

PlanSpec Generated(SamplerKind kind, uint64_t n, uint64_t epochs, uint64_t seed) {
  PlanSpec s;
  s.kind = kind;
  s.dataset_size = n;
  s.epochs = epochs;
  s.seed = seed;
  return s;
}

PlanSpec Explicit(std::vector<ItemId> ids, uint64_t dataset_size = 0, uint64_t epoch_length = 0) {
  PlanSpec s;
  s.kind = SamplerKind::kExplicit;
  s.ids = std::make_shared<const std::vector<ItemId>>(std::move(ids));
  s.dataset_size = dataset_size;
  s.epoch_length = epoch_length;
  return s;
}

PlanSpec FilePlan(const std::string& path, uint64_t dataset_size = 0, uint64_t epoch_length = 0) {
  PlanSpec s;
  s.kind = SamplerKind::kFile;
  s.path = path;
  s.dataset_size = dataset_size;
  s.epoch_length = epoch_length;
  return s;
}

// Opens the spec and streams it to the end, `chunk` ids at a time.
Status StreamAll(const PlanSpec& spec, std::vector<ItemId>* out, PlanShape* shape = nullptr,
                 size_t chunk = 1000) {
  out->clear();
  std::unique_ptr<PlanSource> source;
  Status st = OpenPlanSource(spec, &source);
  if (!st.ok()) {
    CHECK(source == nullptr);
    return st;
  }
  REQUIRE(source != nullptr);
  if (shape) *shape = source->shape();
  std::vector<ItemId> buf(chunk);
  for (;;) {
    size_t count = 777777;
    st = source->Read(buf.data(), buf.size(), &count);
    if (!st.ok()) return st;
    REQUIRE(count <= chunk);
    if (count == 0) break;
    out->insert(out->end(), buf.begin(), buf.begin() + count);
  }
  // Exhausted stays exhausted.
  size_t again = 5;
  st = source->Read(buf.data(), buf.size(), &again);
  CHECK(st.ok());
  CHECK(again == 0);
  CHECK(out->size() == source->shape().total_reads);
  return Status::OK();
}

std::vector<ItemId> Concat(const PlanSpec& spec) {
  std::vector<ItemId> all, epoch;
  for (uint64_t e = 0; e < spec.epochs; ++e) {
    GenerateEpoch(spec, e, &epoch);
    all.insert(all.end(), epoch.begin(), epoch.end());
  }
  return all;
}

bool IsPermutation(const std::vector<ItemId>& v, uint64_t n) {
  if (v.size() != n) return false;
  std::vector<bool> seen(n, false);
  for (ItemId x : v) {
    if (x >= n || seen[x]) return false;
    seen[x] = true;
  }
  return true;
}

// ---------------------------------------------------------- the primitives

TEST_CASE("The reference itself matches SplitMix64's published first output",
          "[plan][reference]") {
  ref::Rng rng{0};
  CHECK(rng.Draw() == 0xE220A8397B1DCDAFull);
}

TEST_CASE("Mix64, EpochSeed and SplitMix64 are exactly as documented", "[plan]") {
  std::vector<uint64_t> inputs = {0, 1, 2, 42, 0x9E3779B97F4A7C15ull, UINT64_MAX,
                                  UINT64_MAX - 1, uint64_t{1} << 63};
  ref::Rng gen{12345};
  for (int i = 0; i < 200; ++i) inputs.push_back(gen.Draw());
  for (uint64_t z : inputs) {
    INFO("z = " << z);
    REQUIRE(Mix64(z) == ref::Mix64(z));
    for (uint64_t e : {0ull, 1ull, 2ull, 1000ull, 0xFFFFFFFFull}) {
      REQUIRE(EpochSeed(z, e) == ref::EpochSeed(z, e));
    }
    SplitMix64 engine(z);
    ref::Rng mine{z};
    for (int k = 0; k < 20; ++k) REQUIRE(engine.Next() == mine.Draw());
  }
}

TEST_CASE("SplitMix64::Below is Lemire's unbiased multiply-shift", "[plan]") {
  // Small n, powers of two, and n just above 2^63, where about half of all
  // draws are rejected, so that the redraw loop runs often.
  std::vector<uint64_t> ns = {1, 2, 3, 5, 7, 10, 16, 1000, 1000003, (uint64_t{1} << 32) - 1,
                              uint64_t{1} << 32, (uint64_t{1} << 63) + 1,
                              (uint64_t{1} << 63) + 12345, UINT64_MAX, UINT64_MAX - 2};
  for (uint64_t seed : {0ull, 1ull, 99ull, 0xDEADBEEFull}) {
    for (uint64_t n : ns) {
      INFO("seed " << seed << " n " << n);
      SplitMix64 engine(seed);
      ref::Rng mine{seed};
      for (int k = 0; k < 300; ++k) {
        const uint64_t got = engine.Below(n);
        REQUIRE(got == mine.Below(n));
        REQUIRE(got < n);
      }
      // The states advanced alike (the same number of redraws).
      REQUIRE(engine.Next() == mine.Draw());
    }
  }
  // Mixed n on one stream.
  SplitMix64 engine(7);
  ref::Rng mine{7};
  for (uint64_t i = 1; i < 5000; ++i) {
    const uint64_t n = (i * 0x9E3779B97F4A7C15ull) | 1;
    REQUIRE(engine.Below(n) == mine.Below(n));
    REQUIRE(engine.Below(i) == mine.Below(i));
  }
}

// ---------------------------------------------------------- the generators

TEST_CASE("sequential reads 0..N-1 every epoch", "[plan]") {
  PlanSpec spec = Generated(SamplerKind::kSequential, 37, 3, 5);
  std::vector<ItemId> epoch;
  for (uint64_t e = 0; e < 3; ++e) {
    GenerateEpoch(spec, e, &epoch);
    CHECK(epoch == ref::Sequential(37));
  }
  std::vector<ItemId> all;
  PlanShape shape;
  REQUIRE(StreamAll(spec, &all, &shape, 10).ok());
  CHECK(all == Concat(spec));
  CHECK(shape.dataset_size == 37);
  CHECK(shape.epochs == 3);
  CHECK(shape.epoch_length == 37);
  CHECK(shape.total_reads == 111);
}

TEST_CASE("shuffle equals the documented Fisher-Yates, element by element", "[plan]") {
  for (uint64_t n : {1ull, 2ull, 3ull, 10ull, 97ull, 1000ull, 65537ull}) {
    for (uint64_t seed : {0ull, 1ull, 7ull, 0xFFFFFFFFFFFFull}) {
      PlanSpec spec = Generated(SamplerKind::kShuffle, n, 3, seed);
      std::vector<ItemId> epoch;
      std::vector<ItemId> expected_all;
      for (uint64_t e = 0; e < 3; ++e) {
        INFO("n " << n << " seed " << seed << " epoch " << e);
        GenerateEpoch(spec, e, &epoch);
        const std::vector<ItemId> expected = ref::Shuffle(n, seed, e);
        REQUIRE(epoch == expected);
        REQUIRE(IsPermutation(epoch, n));
        expected_all.insert(expected_all.end(), expected.begin(), expected.end());
      }
      std::vector<ItemId> all;
      PlanShape shape;
      REQUIRE(StreamAll(spec, &all, &shape, 333).ok());
      REQUIRE(all == expected_all);
      CHECK(shape.dataset_size == n);
      CHECK(shape.epochs == 3);
      CHECK(shape.epoch_length == n);
      CHECK(shape.total_reads == 3 * n);
    }
  }
}

TEST_CASE("shuffle is deterministic and differs across epochs and seeds", "[plan]") {
  const uint64_t n = 500;
  PlanSpec a = Generated(SamplerKind::kShuffle, n, 4, 11);
  PlanSpec b = Generated(SamplerKind::kShuffle, n, 4, 12);
  std::vector<ItemId> a0, a0_again, a1, b0;
  GenerateEpoch(a, 0, &a0);
  GenerateEpoch(a, 0, &a0_again);
  GenerateEpoch(a, 1, &a1);
  GenerateEpoch(b, 0, &b0);
  CHECK(a0 == a0_again);
  CHECK(a0 != a1);
  CHECK(a0 != b0);
  CHECK(a0 != ref::Sequential(n));
  for (const auto* v : {&a0, &a1, &b0}) CHECK(IsPermutation(*v, n));
  // GenerateEpoch overwrites its output rather than appending.
  std::vector<ItemId> reused = {1, 2, 3};
  GenerateEpoch(a, 1, &reused);
  CHECK(reused == a1);
  // Two sources of the same spec stream the same ids.
  std::vector<ItemId> s1, s2;
  REQUIRE(StreamAll(a, &s1, nullptr, 7).ok());
  REQUIRE(StreamAll(a, &s2, nullptr, 4096).ok());
  CHECK(s1 == s2);
}

TEST_CASE("replacement draws num_samples ids with Below(N)", "[plan]") {
  for (uint64_t n : {1ull, 2ull, 10ull, 1000ull}) {
    for (uint64_t num_samples : {0ull, 1ull, 5ull, 2500ull}) {
      PlanSpec spec = Generated(SamplerKind::kReplacement, n, 2, 3);
      spec.num_samples = num_samples;
      const uint64_t draws = num_samples ? num_samples : n;
      std::vector<ItemId> epoch, expected_all;
      for (uint64_t e = 0; e < 2; ++e) {
        INFO("n " << n << " num_samples " << num_samples << " epoch " << e);
        GenerateEpoch(spec, e, &epoch);
        const std::vector<ItemId> expected = ref::Replacement(n, 3, e, draws);
        REQUIRE(epoch == expected);
        REQUIRE(epoch.size() == draws);
        for (ItemId x : epoch) REQUIRE(x < n);
        expected_all.insert(expected_all.end(), expected.begin(), expected.end());
      }
      std::vector<ItemId> all;
      PlanShape shape;
      REQUIRE(StreamAll(spec, &all, &shape, 64).ok());
      REQUIRE(all == expected_all);
      CHECK(shape.dataset_size == n);
      CHECK(shape.epochs == 2);
      CHECK(shape.epoch_length == draws);
      CHECK(shape.total_reads == 2 * draws);
    }
  }
  // Draws repeat and miss ids: it is not a permutation.
  PlanSpec spec = Generated(SamplerKind::kReplacement, 1000, 1, 9);
  std::vector<ItemId> epoch;
  GenerateEpoch(spec, 0, &epoch);
  CHECK(std::set<ItemId>(epoch.begin(), epoch.end()).size() < 1000);
}

TEST_CASE("distributed equals torch's DistributedSampler over the shuffle permutation",
          "[plan][distributed]") {
  int compared = 0;
  for (uint64_t n = 1; n <= 40; ++n) {
    for (uint32_t w = 1; w <= 9; ++w) {
      for (bool drop_last : {false, true}) {
        if (drop_last && n < w) continue;  // torch yields nothing at all
        for (uint64_t seed : {0ull, 5ull}) {
          uint64_t total = 0;
          const std::vector<ItemId> padded =
              ref::TorchPadded(ref::Shuffle(n, seed, 1), w, drop_last, &total);
          std::vector<ItemId> rebuilt(total, 0xFFFFFFFF);
          for (uint32_t r = 0; r < w; ++r) {
            INFO("n " << n << " w " << w << " rank " << r << " drop_last " << drop_last
                      << " seed " << seed);
            PlanSpec spec = Generated(SamplerKind::kDistributed, n, 2, seed);
            spec.world_size = w;
            spec.rank = r;
            spec.drop_last = drop_last;
            std::vector<ItemId> epoch;
            GenerateEpoch(spec, 1, &epoch);
            REQUIRE(epoch == ref::Distributed(n, seed, 1, w, r, drop_last));
            for (size_t i = 0; i < epoch.size(); ++i) rebuilt[r + i * w] = epoch[i];
            ++compared;
          }
          // The ranks together read the padded (or truncated) list exactly.
          REQUIRE(rebuilt == padded);
          // Padding wraps around the permutation's start; drop_last keeps a prefix.
          const std::vector<ItemId> perm = ref::Shuffle(n, seed, 1);
          REQUIRE(total == (drop_last ? (n / w) * w : (n + w - 1) / w * w));
          for (uint64_t k = 0; k < total; ++k) REQUIRE(padded[k] == perm[k % n]);
        }
      }
    }
  }
  CHECK(compared > 1000);
}

TEST_CASE("distributed: padding larger than N wraps several times", "[plan][distributed]") {
  // N = 2, W = 7: total 7, padding 5 > N; torch pads with perm * 3, cut to 5.
  const std::vector<ItemId> perm = ref::Shuffle(2, 4, 0);
  for (uint32_t r = 0; r < 7; ++r) {
    PlanSpec spec = Generated(SamplerKind::kDistributed, 2, 1, 4);
    spec.world_size = 7;
    spec.rank = r;
    std::vector<ItemId> epoch;
    GenerateEpoch(spec, 0, &epoch);
    REQUIRE(epoch.size() == 1);
    CHECK(epoch[0] == perm[r % 2]);
  }
}

TEST_CASE("distributed with W = 1 equals shuffle", "[plan][distributed]") {
  for (bool drop_last : {false, true}) {
    PlanSpec d = Generated(SamplerKind::kDistributed, 313, 3, 17);
    d.world_size = 1;
    d.rank = 0;
    d.drop_last = drop_last;
    PlanSpec s = Generated(SamplerKind::kShuffle, 313, 3, 17);
    std::vector<ItemId> dv, sv;
    REQUIRE(StreamAll(d, &dv).ok());
    REQUIRE(StreamAll(s, &sv).ok());
    CHECK(dv == sv);
  }
}

TEST_CASE("distributed streams and shapes", "[plan][distributed]") {
  struct Case {
    uint64_t n;
    uint32_t w;
    bool drop_last;
  };
  for (const Case& c : {Case{10, 3, false}, Case{10, 3, true}, Case{12, 4, false},
                        Case{12, 4, true}, Case{5, 8, false}, Case{1000, 7, true}}) {
    for (uint32_t r = 0; r < c.w; ++r) {
      INFO("n " << c.n << " w " << c.w << " drop_last " << c.drop_last << " rank " << r);
      PlanSpec spec = Generated(SamplerKind::kDistributed, c.n, 3, 21);
      spec.world_size = c.w;
      spec.rank = r;
      spec.drop_last = c.drop_last;
      std::vector<ItemId> all, expected;
      PlanShape shape;
      REQUIRE(StreamAll(spec, &all, &shape, 5).ok());
      for (uint64_t e = 0; e < 3; ++e) {
        const std::vector<ItemId> ep = ref::Distributed(c.n, 21, e, c.w, r, c.drop_last);
        expected.insert(expected.end(), ep.begin(), ep.end());
      }
      REQUIRE(all == expected);
      const uint64_t per_rank = c.drop_last ? c.n / c.w : (c.n + c.w - 1) / c.w;
      CHECK(shape.dataset_size == c.n);
      CHECK(shape.epochs == 3);
      CHECK(shape.epoch_length == per_rank);
      CHECK(shape.total_reads == 3 * per_rank);
    }
  }
}

TEST_CASE("A generated plan of a billion reads opens at once and streams lazily", "[plan]") {
  PlanSpec spec = Generated(SamplerKind::kShuffle, 1000, 1000000, 3);
  std::unique_ptr<PlanSource> source;
  REQUIRE(OpenPlanSource(spec, &source).ok());
  CHECK(source->shape().total_reads == 1000000000ull);
  std::vector<ItemId> got(2500);
  size_t have = 0;
  while (have < got.size()) {
    size_t count = 0;
    REQUIRE(source->Read(got.data() + have, got.size() - have, &count).ok());
    REQUIRE(count > 0);
    have += count;
  }
  std::vector<ItemId> expected;
  for (uint64_t e = 0; e < 3; ++e) {
    const auto ep = ref::Shuffle(1000, 3, e);
    expected.insert(expected.end(), ep.begin(), ep.end());
  }
  expected.resize(2500);
  CHECK(got == expected);
}

// -------------------------------------------------------------- file plans

TEST_CASE("File plans stream the file's values", "[plan][file]") {
  TempDir dir;
  SECTION("text with comments: one epoch, N inferred") {
    const std::string path = dir.File("plan.txt");
    WriteBytes(path, "# recorded order\n3\n1\n\n4\n1\n5\n9\n2\n6\n");
    std::vector<ItemId> all;
    PlanShape shape;
    REQUIRE(StreamAll(FilePlan(path), &all, &shape, 3).ok());
    CHECK(all == std::vector<ItemId>{3, 1, 4, 1, 5, 9, 2, 6});
    CHECK(shape.dataset_size == 10);
    CHECK(shape.epochs == 1);
    CHECK(shape.epoch_length == 8);
    CHECK(shape.total_reads == 8);
  }
  SECTION("u32 with epoch_length and a given N") {
    const std::string path = dir.File("plan.u32");
    std::string bytes;
    for (uint32_t v : {0, 1, 2, 3, 2, 1, 0, 3, 1, 1, 1, 1}) bytes += LE(v, 4);
    WriteBytes(path, bytes);
    std::vector<ItemId> all;
    PlanShape shape;
    REQUIRE(StreamAll(FilePlan(path, 50, 4), &all, &shape, 5).ok());
    CHECK(all == std::vector<ItemId>{0, 1, 2, 3, 2, 1, 0, 3, 1, 1, 1, 1});
    CHECK(shape.dataset_size == 50);
    CHECK(shape.epochs == 3);
    CHECK(shape.epoch_length == 4);
    CHECK(shape.total_reads == 12);
  }
  SECTION("u64") {
    const std::string path = dir.File("plan.u64");
    std::string bytes;
    for (uint64_t v : {7, 0, 7, 3}) bytes += LE(v, 8);
    WriteBytes(path, bytes);
    std::vector<ItemId> all;
    PlanShape shape;
    REQUIRE(StreamAll(FilePlan(path), &all, &shape).ok());
    CHECK(all == std::vector<ItemId>{7, 0, 7, 3});
    CHECK(shape.dataset_size == 8);
  }
  SECTION("npy 2-D int64: rows are epochs") {
    const std::string path = dir.File("plan.npy");
    const std::string dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }";
    std::string header = dict;
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + LE(header.size(), 2) + header;
    const std::vector<ItemId> ids = {2, 0, 3, 1, 1, 3, 0, 2, 0, 1, 2, 3};
    for (ItemId v : ids) bytes += LE(v, 8);
    WriteBytes(path, bytes);
    std::vector<ItemId> all;
    PlanShape shape;
    REQUIRE(StreamAll(FilePlan(path), &all, &shape, 5).ok());
    CHECK(all == ids);
    CHECK(shape.dataset_size == 4);
    CHECK(shape.epochs == 3);
    CHECK(shape.epoch_length == 4);
    CHECK(shape.total_reads == 12);
  }
}

TEST_CASE("File plans: an id at or above the given N names its line or position",
          "[plan][file]") {
  TempDir dir;
  SECTION("text: id 10 on line 5 with N = 10") {
    const std::string path = dir.File("plan.txt");
    WriteBytes(path, "1\n# c\n2\n\n10\n3\n");
    std::unique_ptr<PlanSource> source;
    Status st = OpenPlanSource(FilePlan(path, 10), &source);
    REQUIRE_FALSE(st.ok());
    INFO(st.ToString());
    CHECK(source == nullptr);
    CHECK(NamesNumber(st.message(), 5, {path}));
    // N = 11 admits it.
    std::vector<ItemId> all;
    CHECK(StreamAll(FilePlan(path, 11), &all).ok());
  }
  SECTION("u32: id 40 at position 6 (byte offset 24) with N = 40") {
    const std::string path = dir.File("plan.u32");
    std::string bytes;
    for (uint32_t v : {0, 1, 2, 3, 4, 5, 40, 7}) bytes += LE(v, 4);
    WriteBytes(path, bytes);
    std::unique_ptr<PlanSource> source;
    Status st = OpenPlanSource(FilePlan(path, 40), &source);
    REQUIRE_FALSE(st.ok());
    INFO(st.ToString());
    CHECK(source == nullptr);
    CHECK((NamesNumber(st.message(), 24, {path}) || NamesNumber(st.message(), 6, {path})));
  }
  SECTION("u64: an id that does not fit 32 bits") {
    const std::string path = dir.File("plan.u64");
    WriteBytes(path, LE(1, 8) + LE(uint64_t{1} << 32, 8));
    std::unique_ptr<PlanSource> source;
    CHECK_FALSE(OpenPlanSource(FilePlan(path), &source).ok());
    CHECK(source == nullptr);
  }
  SECTION("a malformed line is reported at open with its line number") {
    const std::string path = dir.File("plan.txt");
    WriteBytes(path, "1\n2\n3\n4\n5\n6\nseven\n8\n");
    std::unique_ptr<PlanSource> source;
    Status st = OpenPlanSource(FilePlan(path), &source);
    REQUIRE_FALSE(st.ok());
    INFO(st.ToString());
    CHECK(NamesNumber(st.message(), 7, {path}));
  }
  SECTION("a missing file is NotFound") {
    std::unique_ptr<PlanSource> source;
    Status st = OpenPlanSource(FilePlan(dir.File("nope.u32")), &source);
    CHECK(st.IsNotFound());
    CHECK(source == nullptr);
  }
}

TEST_CASE("File plans: epoch_length must divide the number of reads", "[plan][file]") {
  TempDir dir;
  const std::string path = dir.File("plan.txt");
  WriteBytes(path, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
  std::unique_ptr<PlanSource> source;
  CHECK(OpenPlanSource(FilePlan(path, 0, 3), &source).IsInvalidArgument());
  CHECK(source == nullptr);
  std::vector<ItemId> all;
  PlanShape shape;
  REQUIRE(StreamAll(FilePlan(path, 0, 5), &all, &shape).ok());
  CHECK(shape.epochs == 2);
  CHECK(shape.epoch_length == 5);
}

// Reads a source to the end or to its first error; returns that status.
Status Drain(PlanSource* source, std::vector<ItemId>* out, size_t chunk) {
  std::vector<ItemId> buf(chunk);
  for (;;) {
    size_t count = 0;
    Status st = source->Read(buf.data(), buf.size(), &count);
    if (!st.ok()) return st;
    if (count == 0) return Status::OK();
    out->insert(out->end(), buf.begin(), buf.begin() + count);
  }
}

TEST_CASE("File plans: a file that changes after it was opened is an error, for good",
          "[plan][file]") {
  TempDir dir;
  const std::string path = dir.File("plan.u32");
  std::string bytes;
  for (uint32_t i = 0; i < 100000; ++i) bytes += LE(i % 50, 4);
  WriteBytes(path, bytes);
  SECTION("truncated") {
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(FilePlan(path), &source).ok());
    REQUIRE(source->shape().total_reads == 100000);
    WriteBytes(path, bytes.substr(0, 4 * 1000));
    std::vector<ItemId> got;
    Status st = Drain(source.get(), &got, 4096);
    CHECK_FALSE(st.ok());  // not a silent short plan
    CHECK(got.size() < 100000);
    size_t count = 0;
    ItemId one;
    CHECK_FALSE(source->Read(&one, 1, &count).ok());  // later calls keep returning it
  }
  SECTION("an id beyond the dataset size written in place") {
    std::unique_ptr<PlanSource> source;
    REQUIRE(OpenPlanSource(FilePlan(path), &source).ok());
    REQUIRE(source->shape().dataset_size == 50);
    std::string changed = bytes;
    const std::string big = LE(4000000, 4);
    changed.replace(4 * 90000, 4, big);
    WriteBytes(path, changed);
    std::vector<ItemId> got;
    Status st = Drain(source.get(), &got, 1000);
    CHECK_FALSE(st.ok());
    CHECK(got.size() <= 90000);
    for (ItemId id : got) REQUIRE(id < 50);
    size_t count = 0;
    ItemId one;
    CHECK_FALSE(source->Read(&one, 1, &count).ok());
  }
}

// ---------------------------------------------------------- explicit plans

TEST_CASE("Explicit plans serve their vector", "[plan][explicit]") {
  const std::vector<ItemId> ids = {4, 4, 0, 2, 7, 1, 0, 2};
  std::vector<ItemId> all;
  PlanShape shape;
  REQUIRE(StreamAll(Explicit(ids), &all, &shape, 3).ok());
  CHECK(all == ids);
  CHECK(shape.dataset_size == 8);  // max id + 1
  CHECK(shape.epochs == 1);
  CHECK(shape.epoch_length == 8);
  CHECK(shape.total_reads == 8);

  REQUIRE(StreamAll(Explicit(ids, 100, 2), &all, &shape, 1).ok());
  CHECK(all == ids);
  CHECK(shape.dataset_size == 100);
  CHECK(shape.epochs == 4);
  CHECK(shape.epoch_length == 2);
  CHECK(shape.total_reads == 8);

  // The exact bound is allowed.
  CHECK(StreamAll(Explicit(ids, 8), &all).ok());
}

TEST_CASE("Explicit plans: an id at or above N names its position", "[plan][explicit]") {
  std::unique_ptr<PlanSource> source;
  Status st = OpenPlanSource(Explicit({0, 1, 2, 9, 1}, 5), &source);
  REQUIRE_FALSE(st.ok());
  INFO(st.ToString());
  CHECK(source == nullptr);
  CHECK(NamesNumber(st.message(), 3));  // 0-based position, as everywhere in the engine
}

TEST_CASE("Explicit plans: epoch_length must divide the number of reads", "[plan][explicit]") {
  std::unique_ptr<PlanSource> source;
  CHECK(OpenPlanSource(Explicit({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 3), &source)
            .IsInvalidArgument());
  CHECK(source == nullptr);
  CHECK(OpenPlanSource(Explicit({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 20), &source)
            .IsInvalidArgument());
  CHECK(source == nullptr);
}

// The documented algorithm (plan.h), worked independently: FNV-1a over the
// length and then each id, each as 8 little-endian bytes.
std::string DocumentedFingerprint(const std::vector<uint64_t>& ids) {
  uint64_t h = 14695981039346656037ull;
  auto add = [&h](uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<unsigned char>(word >> (8 * i));
      h *= 1099511628211ull;
    }
  };
  add(ids.size());
  for (uint64_t id : ids) add(id);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

TEST_CASE("PlanFingerprint is the documented FNV-1a and Describe carries it",
          "[plan][explicit][fingerprint]") {
  // The same constants are in tests/python/test_resume.py, which checks
  // _core.plan_fingerprint (what PlannedSampler uses) against them.
  const std::vector<ItemId> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::vector<int64_t> ids64(ids.begin(), ids.end());
  CHECK(PlanFingerprint(ids.data(), ids.size()) == "a11da7398e6bf662");
  CHECK(PlanFingerprint(ids64.data(), ids64.size()) == "a11da7398e6bf662");
  CHECK(PlanFingerprint(static_cast<const ItemId*>(nullptr), 0) == "a8c7f832281a39c5");
  CHECK(DocumentedFingerprint({3, 1, 4, 1, 5, 9, 2, 6}) == "a11da7398e6bf662");
  CHECK(DocumentedFingerprint({}) == "a8c7f832281a39c5");
  // The length is hashed: [0] and [0, 0] differ, as do a sequence and its prefix.
  const ItemId zeros[] = {0, 0};
  CHECK(PlanFingerprint(zeros, 1) == DocumentedFingerprint({0}));
  CHECK(PlanFingerprint(zeros, 1) != PlanFingerprint(zeros, 2));
  CHECK(PlanFingerprint(ids.data(), 7) != PlanFingerprint(ids.data(), 8));
  // A negative int64 is its two's complement.
  const int64_t minus_one = -1;
  CHECK(PlanFingerprint(&minus_one, 1) == DocumentedFingerprint({UINT64_MAX}));

  const std::string d = Explicit(ids, 10, 4).Describe();
  CHECK(d == "explicit reads=8 fingerprint=a11da7398e6bf662 n=10 epoch_length=4");
  CHECK(Explicit({3, 1, 4, 1, 5, 9, 2, 7}).Describe() != Explicit(ids).Describe());
}

TEST_CASE("Explicit plans without ids are rejected", "[plan][explicit]") {
  PlanSpec spec;
  spec.kind = SamplerKind::kExplicit;
  std::unique_ptr<PlanSource> source;
  CHECK_FALSE(OpenPlanSource(spec, &source).ok());
  CHECK(source == nullptr);
}

// --------------------------------------------------------------- validation

TEST_CASE("Invalid generated specs are InvalidArgument", "[plan][validation]") {
  std::unique_ptr<PlanSource> source;
  for (SamplerKind kind : {SamplerKind::kSequential, SamplerKind::kShuffle,
                           SamplerKind::kReplacement, SamplerKind::kDistributed}) {
    INFO(SamplerName(kind));
    PlanSpec zero_n = Generated(kind, 0, 1, 0);
    CHECK(OpenPlanSource(zero_n, &source).IsInvalidArgument());
    CHECK(source == nullptr);
    PlanSpec zero_epochs = Generated(kind, 10, 0, 0);
    CHECK(OpenPlanSource(zero_epochs, &source).IsInvalidArgument());
    CHECK(source == nullptr);
    PlanSpec too_big = Generated(kind, kMaxDatasetSize + 1, 1, 0);
    CHECK_FALSE(OpenPlanSource(too_big, &source).ok());
    CHECK(source == nullptr);
  }
  PlanSpec rank = Generated(SamplerKind::kDistributed, 10, 1, 0);
  rank.world_size = 4;
  rank.rank = 4;
  CHECK(OpenPlanSource(rank, &source).IsInvalidArgument());
  CHECK(source == nullptr);
  rank.rank = 7;
  CHECK(OpenPlanSource(rank, &source).IsInvalidArgument());
  PlanSpec world = Generated(SamplerKind::kDistributed, 10, 1, 0);
  world.world_size = 0;
  world.rank = 0;
  CHECK(OpenPlanSource(world, &source).IsInvalidArgument());
  CHECK(source == nullptr);
  // A valid one, for contrast.
  rank.rank = 3;
  CHECK(OpenPlanSource(rank, &source).ok());
  CHECK(source != nullptr);
}

TEST_CASE("Sampler names parse and print", "[plan]") {
  const std::vector<std::pair<std::string, SamplerKind>> names = {
      {"sequential", SamplerKind::kSequential},
      {"shuffle", SamplerKind::kShuffle},
      {"replacement", SamplerKind::kReplacement},
      {"distributed", SamplerKind::kDistributed},
      {"file", SamplerKind::kFile}};
  for (const auto& [name, kind] : names) {
    SamplerKind parsed = SamplerKind::kExplicit;
    REQUIRE(ParseSamplerKind(name, &parsed).ok());
    CHECK(parsed == kind);
    CHECK(std::string(SamplerName(kind)) == name);
  }
  SamplerKind unused;
  CHECK_FALSE(ParseSamplerKind("bogus", &unused).ok());
  CHECK_FALSE(ParseSamplerKind("", &unused).ok());
  CHECK_FALSE(ParseSamplerKind("Shuffle ", &unused).ok());
}

// ------------------------------------------------------------------ Describe

TEST_CASE("Describe: the documented example", "[plan][describe]") {
  CHECK(Generated(SamplerKind::kShuffle, 1000, 3, 7).Describe() ==
        "shuffle n=1000 epochs=3 seed=7");
}

TEST_CASE("Describe is the same for equal specs and differs when a field differs",
          "[plan][describe]") {
  // 1002 % 4 != 0, so drop_last changes the plan.
  PlanSpec base = Generated(SamplerKind::kDistributed, 1002, 3, 7);
  base.world_size = 4;
  base.rank = 1;
  PlanSpec same = base;
  CHECK(base.Describe() == same.Describe());
  CHECK_FALSE(base.Describe().empty());
  CHECK(base.Describe().find('\n') == std::string::npos);

  std::vector<PlanSpec> variants;
  auto vary = [&](auto change) {
    PlanSpec v = base;
    change(v);
    variants.push_back(v);
  };
  vary([](PlanSpec& s) { s.dataset_size = 1003; });
  vary([](PlanSpec& s) { s.epochs = 4; });
  vary([](PlanSpec& s) { s.seed = 8; });
  vary([](PlanSpec& s) { s.world_size = 5; });
  vary([](PlanSpec& s) { s.rank = 2; });
  vary([](PlanSpec& s) { s.drop_last = true; });
  vary([](PlanSpec& s) { s.kind = SamplerKind::kShuffle; s.world_size = 1; s.rank = 0; });
  std::set<std::string> seen = {base.Describe()};
  for (const PlanSpec& v : variants) {
    INFO(v.Describe());
    CHECK(seen.insert(v.Describe()).second);
  }

  // Replacement: num_samples matters.
  PlanSpec r1 = Generated(SamplerKind::kReplacement, 100, 1, 0);
  r1.num_samples = 50;
  PlanSpec r2 = r1;
  r2.num_samples = 60;
  CHECK(r1.Describe() != r2.Describe());
  // Sequential differs from shuffle of the same size.
  CHECK(Generated(SamplerKind::kSequential, 100, 1, 0).Describe() !=
        Generated(SamplerKind::kShuffle, 100, 1, 0).Describe());

  // File plans: the path, N and the epoch length matter.
  PlanSpec f1 = FilePlan("/data/a.u32");
  PlanSpec f2 = FilePlan("/data/b.u32");
  CHECK(f1.Describe() == FilePlan("/data/a.u32").Describe());
  CHECK(f1.Describe() != f2.Describe());
  CHECK(f1.Describe() != FilePlan("/data/a.u32", 100).Describe());
  CHECK(f1.Describe() != FilePlan("/data/a.u32", 0, 10).Describe());
}

TEST_CASE("Describe: fields a generated plan ignores do not change it",
          "[plan][describe][canonical]") {
  // "Two specs that describe the same generated plan give the same string."
  PlanSpec seq1 = Generated(SamplerKind::kSequential, 100, 2, 1);
  PlanSpec seq2 = Generated(SamplerKind::kSequential, 100, 2, 99);  // seed unused
  CHECK(seq1.Describe() == seq2.Describe());

  PlanSpec sh1 = Generated(SamplerKind::kShuffle, 100, 2, 5);
  PlanSpec sh2 = sh1;
  sh2.world_size = 8;  // distributed-only fields
  sh2.rank = 3;
  sh2.drop_last = true;
  sh2.num_samples = 17;  // replacement-only
  CHECK(sh1.Describe() == sh2.Describe());

  PlanSpec rep1 = Generated(SamplerKind::kReplacement, 100, 2, 5);
  rep1.num_samples = 0;  // "0 means N"
  PlanSpec rep2 = rep1;
  rep2.num_samples = 100;
  CHECK(rep1.Describe() == rep2.Describe());
}

}  // namespace
}  // namespace opt4store
