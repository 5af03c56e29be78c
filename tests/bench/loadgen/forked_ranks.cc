#include "loadgen/forked_ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace torchmon::loadgen {
namespace {

std::string OneLine(const std::string& text) {
  return absl::StrReplaceAll(text, {{"\n", " "}, {"\r", " "}});
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The next line from `fd`, without its newline; nullopt on EOF, error or
// deadline.
std::optional<std::string> ReadLine(int fd, std::string& buffered, Clock::time_point deadline) {
  for (;;) {
    if (const size_t nl = buffered.find('\n'); nl != std::string::npos) {
      std::string line = buffered.substr(0, nl);
      buffered.erase(0, nl + 1);
      return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0) return std::nullopt;
    if (ready == 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return std::nullopt;
    buffered.append(buf, static_cast<size_t>(n));
  }
}

std::string SerializeResult(const RankResult& r) {
  std::string out =
      absl::StrCat("result ", r.rank, " ", r.client_dropped, " ", r.samples_written, " ",
                   r.produce_seconds, " ", r.total_seconds, " ", r.cpu_seconds, "\n");
  for (const auto& [name, added] : r.added) absl::StrAppend(&out, "stat ", name, " ", added, "\n");
  if (!r.flush_error.empty()) absl::StrAppend(&out, "flush-error ", OneLine(r.flush_error), "\n");
  for (const std::string& e : r.errors) absl::StrAppend(&out, "error ", OneLine(e), "\n");
  return out + "end\n";
}

// Parses one line into `r`; false if it is malformed.
bool ParseResultLine(absl::string_view line, RankResult& r) {
  if (absl::ConsumePrefix(&line, "result ")) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    return f.size() == 6 && absl::SimpleAtoi(f[0], &r.rank) &&
           absl::SimpleAtoi(f[1], &r.client_dropped) &&
           absl::SimpleAtoi(f[2], &r.samples_written) &&
           absl::SimpleAtod(f[3], &r.produce_seconds) && absl::SimpleAtod(f[4], &r.total_seconds) &&
           absl::SimpleAtod(f[5], &r.cpu_seconds);
  }
  if (absl::ConsumePrefix(&line, "stat ")) {
    const size_t space = line.rfind(' ');
    uint64_t added;
    if (space == absl::string_view::npos || !absl::SimpleAtoi(line.substr(space + 1), &added)) {
      return false;
    }
    r.added.emplace_back(std::string(line.substr(0, space)), added);
    return true;
  }
  if (absl::ConsumePrefix(&line, "flush-error ")) {
    r.flush_error = std::string(line);
    return true;
  }
  if (absl::ConsumePrefix(&line, "error ")) {
    r.errors.emplace_back(line);
    return true;
  }
  return false;
}

// The body of a forked rank; returns its exit status.
int RunChild(const LoadgenOptions& options, const std::string& target, const std::string& job,
             int rank, int to_parent, int from_parent) {
  RankWorker worker(options, target, job, rank);
  if (absl::Status s = worker.Connect(std::chrono::milliseconds(options.query_timeout_ms));
      !s.ok()) {
    WriteAll(to_parent, absl::StrCat("fail ", OneLine(std::string(s.message())), "\n"));
    return 1;
  }
  if (!WriteAll(to_parent, "ready\n")) return 1;
  std::string buffered;
  // The parent answers within its own bounded wait, or closes the pipe.
  const std::optional<std::string> go =
      ReadLine(from_parent, buffered, Clock::now() + std::chrono::hours(24));
  int64_t ticks;
  if (!go.has_value() || !absl::SimpleAtoi(*go, &ticks)) return 1;
  const double rate_per_thread =
      options.rate / static_cast<double>(options.ranks * options.threads_per_rank);
  const RankResult result = worker.Run(Clock::time_point(Clock::duration(ticks)), rate_per_thread);
  return WriteAll(to_parent, SerializeResult(result)) ? 0 : 1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ForkedRanks>> ForkedRanks::Start(const LoadgenOptions& options,
                                                                const std::string& target,
                                                                const std::string& job) {
  std::unique_ptr<ForkedRanks> ranks(new ForkedRanks());
  std::fflush(nullptr);  // nothing buffered is written twice
  for (int rank = 0; rank < options.ranks; ++rank) {
    int up[2], down[2];
    if (pipe2(up, O_CLOEXEC) != 0 || pipe2(down, O_CLOEXEC) != 0) {
      return absl::InternalError("pipe failed");
    }
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      close(up[0]);
      close(down[1]);
      for (const Child& other : ranks->children_) {
        close(other.from_child);
        close(other.to_child);
      }
      _exit(RunChild(options, target, job, rank, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    ranks->children_.push_back(Child{pid, up[0], down[1], ""});
  }
  return ranks;
}

ForkedRanks::~ForkedRanks() {
  for (Child& child : children_) {
    if (child.from_child >= 0) close(child.from_child);
    if (child.to_child >= 0) close(child.to_child);
    if (child.pid > 0) {
      kill(child.pid, SIGKILL);
      waitpid(child.pid, nullptr, 0);
    }
  }
}

absl::Status ForkedRanks::WaitReady(Clock::time_point deadline) {
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    const std::optional<std::string> line = ReadLine(child.from_child, child.buffered, deadline);
    if (!line.has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", i, " (pid ", child.pid, ") did not connect in time"));
    }
    absl::string_view text = *line;
    if (absl::ConsumePrefix(&text, "fail ")) return absl::UnavailableError(text);
    if (text != "ready") {
      return absl::InternalError(absl::StrCat("rank ", i, " said \"", text, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ForkedRanks::Go(Clock::time_point start) {
  const std::string line = absl::StrCat(start.time_since_epoch().count(), "\n");
  for (Child& child : children_) {
    if (!WriteAll(child.to_child, line)) {
      return absl::InternalError(absl::StrCat("rank pid ", child.pid, " is gone"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RankResult>> ForkedRanks::Collect(Clock::time_point deadline) {
  std::vector<RankResult> results;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& child = children_[i];
    RankResult result;
    for (;;) {
      const std::optional<std::string> line = ReadLine(child.from_child, child.buffered, deadline);
      if (!line.has_value()) {
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", i, " (pid ", child.pid, ") ended without a result"));
      }
      if (*line == "end") break;
      if (!ParseResultLine(*line, result)) {
        return absl::InternalError(absl::StrCat("rank ", i, " sent \"", *line, "\""));
      }
    }
    results.push_back(std::move(result));
    int status = 0;
    waitpid(child.pid, &status, 0);
    child.pid = -1;
  }
  return results;
}

}  // namespace torchmon::loadgen
