#include "detail/error_log.h"

#include <cstdio>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace torchmon::detail {

void ErrorLog::Print(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

void ErrorLog::Record(std::string message) {
  errors_.push_back(std::move(message));
  if (errors_.size() > kMaxKeptErrors) errors_.pop_front();
}

std::string ErrorLog::ShouldPrint(const std::string& line) {
  if (!print_) return "";
  if (printed_.size() >= kMaxPrintedMessages || !printed_.insert(line).second) return "";
  if (printed_.size() == kMaxPrintedMessages) {
    return absl::StrCat(line, "\ntorchmon: further distinct messages are not printed; ",
                        "see Client::TakeErrors()");
  }
  return line;
}

std::vector<std::string> ErrorLog::Take() {
  std::vector<std::string> errors(std::make_move_iterator(errors_.begin()),
                                  std::make_move_iterator(errors_.end()));
  errors_.clear();
  return errors;
}

}  // namespace torchmon::detail
