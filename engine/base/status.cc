#include "opt4store/status.h"

#include <cerrno>
#include <cstring>

namespace opt4store {

Status::Status(Code code, std::string_view msg)
    : state_(new State{code, std::string(msg)}) {}

Status::Status(const Status& other)
    : state_(other.state_ ? new State(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    state_.reset(other.state_ ? new State(*other.state_) : nullptr);
  }
  return *this;
}

Status Status::FromErrno(std::string_view msg, int errno_value) {
  std::string text(msg);
  text += ": ";
  text += std::strerror(errno_value);
  if (errno_value == ENOSPC || errno_value == EDQUOT) return NoSpace(text);
  if (errno_value == ENOENT) return NotFound(text);
  if (errno_value == EWOULDBLOCK) return Busy(text);
  return IOError(text);
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(state_->code)) + ": " + state_->message;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string text(context);
  text += ": ";
  text += state_->message;
  return Status(state_->code, text);
}

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kNotFound: return "not found";
    case Status::Code::kCorruption: return "corruption";
    case Status::Code::kInvalidArgument: return "invalid argument";
    case Status::Code::kIOError: return "I/O error";
    case Status::Code::kNoSpace: return "no space";
    case Status::Code::kBusy: return "busy";
    case Status::Code::kOutOfRange: return "out of range";
    case Status::Code::kNotSupported: return "not supported";
    case Status::Code::kStale: return "stale store";
  }
  return "unknown";
}

}  // namespace opt4store
