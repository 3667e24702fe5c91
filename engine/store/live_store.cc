// LiveStore (opt4store/live_store.h): the owner file, the control block and
// RAM tier mapped read-only, and the disk index as a RocksDB secondary.
#include "opt4store/live_store.h"

#include "engine/store/owner_file.h"
#include "engine/store/store_impl.h"
#include "tiers/disk_tier_view.h"

namespace opt4store {

class LiveStore::Impl {
 public:
  std::string path;
  OwnerRecord owner;
  std::unique_ptr<ControlBlock> ctl;
  std::unique_ptr<RamTier> ram;
};

LiveStore::LiveStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LiveStore::~LiveStore() = default;

Status LiveStore::Open(const std::string& path, std::unique_ptr<LiveStore>* out) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const std::string where = "store " + path + ": ";
  Status s = ReadOwnerFile(path, &impl->owner);
  if (s.IsNotFound()) return Status::NotFound(where + "no process owns it");
  if (!s.ok()) return Status::NotFound(where + s.message());
  const OwnerRecord& owner = impl->owner;
  const std::string stale = where + "its owner, pid " + std::to_string(owner.pid) + ", is gone";
  if (!shm::ProcessAlive(owner.pid, owner.start_ticks)) return Status::NotFound(stale);
  s = ControlBlock::AttachReadOnly(owner.control_block, &impl->ctl);
  // Gone: the owner closed (or died) since the file was read.
  if (s.IsNotFound()) return Status::NotFound(stale);
  OPT4STORE_RETURN_IF_ERROR(s.WithContext(where + "the owner's control block"));
  const shm::ProcessIdentity creator = impl->ctl->creator();
  if (creator.pid != owner.pid || creator.start_ticks != owner.start_ticks) {
    return Status::NotFound(stale);
  }
  if (impl->ctl->header()->owner_closed.load(std::memory_order_acquire) != 0) {
    return Status::NotFound(where + "its owner, pid " + std::to_string(owner.pid) +
                            ", is closing it");
  }
  s = RamTier::AttachReadOnly(impl->ctl->header()->ram_name, &impl->ram);
  if (s.IsNotFound()) return Status::NotFound(stale);
  OPT4STORE_RETURN_IF_ERROR(s.WithContext(where + "the owner's RAM tier"));
  out->reset(new LiveStore(std::move(impl)));
  return Status::OK();
}

int32_t LiveStore::owner_pid() const { return impl_->owner.pid; }

StoreStats LiveStore::Stats() const {
  StoreStats st;
  ReadSharedStats(impl_->ctl.get(), impl_->ram.get(), &st);
  return st;
}

Status LiveStore::Inspect(StoreInfo* info) const {
  *info = StoreInfo();
  info->path = impl_->path;
  std::unique_ptr<DiskTierView> disk;
  OPT4STORE_RETURN_IF_ERROR(DiskTierView::Open(impl_->path, &disk));
  std::string text;
  OPT4STORE_RETURN_IF_ERROR(disk->GetMeta(kManifestOptionsKey, &text));
  OPT4STORE_RETURN_IF_ERROR(DecodeManifestOptions(text, &info->settings));
  if (!disk->GetMeta(kManifestFingerprintKey, &info->settings.fingerprint).ok()) {
    info->settings.fingerprint.clear();
  }
  PlanSpec plan;
  if (disk->GetMeta(kManifestPlanKey, &text).ok() && DecodePlanSpec(text, &plan).ok()) {
    info->plan = plan.Describe();
  }
  Cursor cursor;
  if (disk->GetMeta(kManifestCursorKey, &text).ok() && DecodeCursor(text, &cursor).ok()) {
    info->cursor_plan = cursor.plan;
  }
  const StoreStats st = Stats();
  info->cursor_position = st.position;
  info->cursor_epoch = st.epoch;
  std::vector<DiskSegmentInfo> segments;
  OPT4STORE_RETURN_IF_ERROR(disk->Segments(&segments));
  for (const DiskSegmentInfo& seg : segments) {
    info->segments.push_back({seg.name, seg.file_bytes, seg.live_bytes});
  }
  return Status::OK();
}

}  // namespace opt4store
