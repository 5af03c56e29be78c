// What the client tells its user: errors kept for Client::TakeErrors, and
// lines printed to stderr at most once each.
#ifndef TORCHMON_CLIENT_DETAIL_ERROR_LOG_H_
#define TORCHMON_CLIENT_DETAIL_ERROR_LOG_H_

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace torchmon::detail {

// Bounded in both directions: the newest kMaxKeptErrors errors are kept;
// a line is printed only the first time, and only kMaxPrintedMessages
// distinct lines ever are (with a notice on the last), so a daemon refusing
// every batch with a slightly different message cannot flood the training
// log. Thread-compatible: ClientCore calls it under its mutex, and prints
// what it returns after letting go.
class ErrorLog {
 public:
  static constexpr size_t kMaxKeptErrors = 1000;
  static constexpr size_t kMaxPrintedMessages = 100;

  explicit ErrorLog(bool print) : print_(print) {}

  // Keeps `message` for Take.
  void Record(std::string message);
  // What to print for `line`: "" if printing is off, the line was printed
  // before or the printing budget is spent; else the line (plus a notice
  // when it spends the budget).
  std::string ShouldPrint(const std::string& line);
  // The kept errors, oldest first; clears them.
  std::vector<std::string> Take();
  // Writes `line` and a newline to stderr: what ShouldPrint returned, once
  // the caller has let go of its mutex.
  static void Print(const std::string& line);

 private:
  const bool print_;
  std::deque<std::string> errors_;
  absl::flat_hash_set<std::string> printed_;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_ERROR_LOG_H_
