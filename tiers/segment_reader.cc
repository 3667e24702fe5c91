#include "tiers/segment_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tiers/disk_format.h"
#include "tiers/segment.h"

namespace opt4store {

Status ReadRecordAt(const std::string& segments_dir, ItemId id, const DiskRecordPlace& place,
                    std::string* buffer, std::string_view* meta, std::string_view* payload,
                    std::string* scratch) {
  if (place.segment == 0 || place.length < kRecordHeaderSize) {
    return Status::NotFound("id " + std::to_string(id) + " has no place on disk");
  }
  const std::string path = segments_dir + "/" + SegmentName(place.segment);
  // O_RDONLY without O_CREAT: a segment compacted away stays gone.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + " is gone");
    return Status::IOError("open " + path + ": " + std::strerror(err));
  }
  buffer->resize(place.length);
  size_t done = 0;
  Status status;
  while (done < place.length) {
    const ssize_t r = ::pread(fd, buffer->data() + done, place.length - done,
                              static_cast<off_t>(place.offset) + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      status = Status::IOError("read " + path + ": " + std::strerror(errno));
      break;
    }
    if (r == 0) {
      status = Status::NotFound(path + " ends before the record of id " + std::to_string(id));
      break;
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  OPT4STORE_RETURN_IF_ERROR(status);
  RecordHeader header;
  OPT4STORE_RETURN_IF_ERROR(
      DecodeRecordView(buffer->data(), buffer->size(), id, meta, payload, scratch, &header));
  if (header.crc != place.crc || header.record_size() != place.length) {
    return Status::Corruption("the record of id " + std::to_string(id) + " at " + path + ":" +
                              std::to_string(place.offset) + " is another version");
  }
  return Status::OK();
}

}  // namespace opt4store
