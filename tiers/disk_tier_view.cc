#include "tiers/disk_tier_view.h"

#include <dirent.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "tiers/disk_format.h"
#include "tiers/index_env.h"

namespace opt4store {
namespace {

// RocksDB's info log, discarded: the secondary would otherwise log into its
// own directory, which goes away with the view anyway.
class DiscardLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

}  // namespace

class DiskTierView::Impl {
 public:
  Impl(std::string dir, std::string scratch) : dir_(std::move(dir)), scratch_(std::move(scratch)) {}
  ~Impl() {
    db_.reset();
    std::error_code ec;
    std::filesystem::remove_all(scratch_, ec);
  }

  std::string dir_;
  std::string scratch_;  // the secondary's own directory
  std::unique_ptr<rocksdb::DB> db_;
};

DiskTierView::DiskTierView(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTierView::~DiskTierView() = default;

Status DiskTierView::Open(const std::string& dir, std::unique_ptr<DiskTierView>* out) {
  const std::string index = dir + "/index";
  struct stat st;
  if (stat((index + "/CURRENT").c_str(), &st) != 0) {
    return Status::NotFound("no disk tier index at " + index);
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string scratch = std::string(tmp && *tmp ? tmp : "/tmp") + "/opt4store-view.XXXXXX";
  if (mkdtemp(scratch.data()) == nullptr) return Status::FromErrno("mkdtemp " + scratch, errno);
  std::unique_ptr<Impl> impl(new Impl(dir, scratch));
  rocksdb::Options ro;
  ro.env = IndexEnv();
  ro.create_if_missing = false;
  ro.max_open_files = -1;  // what a secondary instance asks for
  ro.info_log = std::make_shared<DiscardLogger>();
  ro.stats_dump_period_sec = 0;
  ro.stats_persist_period_sec = 0;
  rocksdb::DB* db = nullptr;
  // The owner may delete a file the secondary is about to read (a flush or
  // a compaction): try again on a fresh listing.
  rocksdb::Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    s = rocksdb::DB::OpenAsSecondary(ro, index, scratch, &db);
    if (s.ok()) break;
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(s, "open " + index + " as a secondary"));
  impl->db_.reset(db);
  std::string format;
  Status f = FromRocks(impl->db_->Get(rocksdb::ReadOptions(), kFormatKey, &format), "read format");
  if (!f.ok() || format != kFormatValue) {
    return Status::Corruption(index + " is not an opt4store disk index");
  }
  out->reset(new DiskTierView(std::move(impl)));
  return Status::OK();
}

Status DiskTierView::GetMeta(std::string_view key, std::string* value) const {
  std::string k(1, kUserTag);
  k.append(key.data(), key.size());
  rocksdb::Status s = impl_->db_->Get(rocksdb::ReadOptions(), k, value);
  if (s.IsNotFound()) return Status::NotFound("no meta key '" + std::string(key) + "'");
  return FromRocks(s, "get meta");
}

Status DiskTierView::Segments(std::vector<DiskSegmentInfo>* segments) const {
  segments->clear();
  std::map<uint32_t, uint64_t> live;  // segment number -> live bytes
  std::unique_ptr<rocksdb::Iterator> it(impl_->db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kIndexTag);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    IndexValue v;
    if (DecodeIndexValue(it->value(), &v)) live[v.segment] += v.length;
  }
  OPT4STORE_RETURN_IF_ERROR(FromRocks(it->status(), "read the index"));
  const std::string seg_dir = impl_->dir_ + "/segments";
  DIR* d = opendir(seg_dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return Status::OK();
    return Status::FromErrno("opendir " + seg_dir, errno);
  }
  std::vector<std::pair<uint32_t, std::string>> names;
  while (dirent* e = readdir(d)) {
    uint32_t number;
    if (ParseSegmentName(e->d_name, &number)) names.emplace_back(number, e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& [number, name] : names) {
    struct stat st;
    // A file compacted away since the listing is skipped.
    if (stat((seg_dir + "/" + name).c_str(), &st) != 0) continue;
    DiskSegmentInfo info;
    info.name = name;
    info.file_bytes = static_cast<uint64_t>(st.st_size);
    info.live_bytes = live.count(number) ? live[number] : 0;
    segments->push_back(std::move(info));
  }
  if (!segments->empty()) segments->back().active = true;
  return Status::OK();
}

}  // namespace opt4store
